# Shared build settings and the helpers every module uses.

include(${CMAKE_CURRENT_LIST_DIR}/PlumbLayers.cmake)

add_library(plumb_warnings INTERFACE)
target_compile_options(plumb_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter
  # C++20 designated initializers may leave fields to their default member initializers; GCC 12's
  # -Wextra still calls that "missing".
  -Wno-missing-field-initializers
  # GCC 12 at -O3 reports impossible memcpy overlaps inside std::string (GCC bug 105329).
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
  $<$<BOOL:${PLUMB_WERROR}>:-Werror>)
if(PLUMB_SANITIZE)
  target_compile_options(plumb_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(plumb_warnings INTERFACE -fsanitize=address,undefined)
endif()
if(PLUMB_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # Coverage instrumentation for libFuzzer in every library; fuzz/ links the fuzzer's main.
  target_compile_options(plumb_warnings INTERFACE -fsanitize=fuzzer-no-link)
endif()
if(PLUMB_NATIVE)
  target_compile_options(plumb_warnings INTERFACE -march=native)
endif()

# plumb_add_library(NAME SOURCES... [DEPS targets...])
# One static library per module: plumb_<NAME>; the public header lives at src/<NAME>/<NAME>.h or
# similar and is included as "<NAME>/header.h". NAME must have a layer in PLUMB_LAYERS, and every
# plumb_ library in DEPS a lower one; anything else stops the configure.
function(plumb_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(plumb_${name} STATIC ${ARG_SOURCES})
  target_include_directories(plumb_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(plumb_${name} PUBLIC ${ARG_DEPS} PRIVATE plumb_warnings)
  set_property(GLOBAL APPEND PROPERTY PLUMB_LIBRARIES ${name})
  plumb_layer_violations(problems ${name} ${ARG_DEPS})
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "Layering violated:\n  ${text}")
  endif()
endfunction()

# plumb_check_layers(): after every library is defined, refuse any link that runs sideways or upward,
# whether it came through plumb_add_library's DEPS or a later target_link_libraries.
function(plumb_check_layers)
  get_property(libraries GLOBAL PROPERTY PLUMB_LIBRARIES)
  set(all "")
  foreach(name IN LISTS libraries)
    get_target_property(deps plumb_${name} LINK_LIBRARIES)
    if(NOT deps)
      set(deps "")
    endif()
    plumb_layer_violations(problems ${name} ${deps})
    list(APPEND all ${problems})
  endforeach()
  if(all)
    list(JOIN all "\n  " text)
    message(FATAL_ERROR "Layering violated:\n  ${text}")
  endif()
endfunction()

# plumb_add_test(NAME SOURCES... DEPS... LABELS unit|integration|e2e [TIMEOUT seconds] [NEEDS_BINARY])
# Every test executable goes through here so that labels and discovery are uniform.
# NEEDS_BINARY: the test starts the real `plumb` executable (PLUMB_BINARY), so build it first.
# PLUMB_SOURCE_DIR is always defined, for fixtures under tests/fixtures, models/ and data/.
function(plumb_add_test name)
  cmake_parse_arguments(ARG "NEEDS_BINARY" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock plumb_warnings)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    PLUMB_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PLUMB_BINARY="$<TARGET_FILE:plumb>")
  if(ARG_NEEDS_BINARY)
    add_dependencies(${name} plumb)
  endif()
  # gtest_discover_tests flattens a list-valued property (the second label would be read as a
  # property name, and TIMEOUT lost with it): it gets the first label, and a ctest include file run
  # after the discovered tests are added sets all of them.
  list(GET ARG_LABELS 0 first_label)
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${first_label}" TIMEOUT ${ARG_TIMEOUT}
    DISCOVERY_TIMEOUT 60)
  list(LENGTH ARG_LABELS n_labels)
  if(n_labels GREATER 1)
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${labels_file}
      "if(DEFINED ${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\")\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()
