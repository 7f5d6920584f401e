# Writes build/generated/plumb_build_info.h at every build with the git commit, so provenance is exact.
set(PLUMB_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${PLUMB_GENERATED_DIR})
add_custom_target(plumb_build_info
  COMMAND ${CMAKE_COMMAND}
    -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${PLUMB_GENERATED_DIR}/plumb_build_info.h
    -DVERSION=${PROJECT_VERSION} -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
    "-DCOMPILER=${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
    -P ${PROJECT_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${PLUMB_GENERATED_DIR}/plumb_build_info.h
  COMMENT "" VERBATIM)
