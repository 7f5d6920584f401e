# The layer table as a check: pure functions over PLUMB_LAYERS (top-level CMakeLists.txt), used by
# plumb_add_library and plumb_check_layers (PlumbHelpers.cmake) and by tests/cmake/layers_test.cmake.

# plumb_layer_of(OUT NAME): the layer number of library plumb_<NAME> in PLUMB_LAYERS (top-level
# CMakeLists.txt: one quoted, space-separated entry per layer, lowest first), or -1 when it has none.
function(plumb_layer_of out name)
  set(layer 0)
  foreach(entry IN LISTS PLUMB_LAYERS)
    string(REPLACE " " ";" members "${entry}")
    list(REMOVE_ITEM members "")
    if(name IN_LIST members)
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
    math(EXPR layer "${layer} + 1")
  endforeach()
  set(${out} -1 PARENT_SCOPE)
endfunction()

# plumb_layer_violations(OUT NAME DEPS...): one message per link of plumb_<NAME> that the layer table
# forbids: NAME without a layer, or a plumb_<X> dependency without a layer or not in a lower layer.
# Dependencies that are not plumb_ libraries (Boost::json, plumb_warnings, generator expressions)
# are not layered. Pure (no targets), so a cmake -P script can test it.
function(plumb_layer_violations out name)
  set(problems "")
  plumb_layer_of(own ${name})
  if(own EQUAL -1)
    list(APPEND problems "plumb_${name} has no layer: add it to PLUMB_LAYERS in the top-level CMakeLists.txt")
  endif()
  foreach(dep IN LISTS ARGN)
    if(dep STREQUAL "plumb_warnings" OR dep STREQUAL "plumb_dnnl" OR NOT dep MATCHES "^plumb_[a-z0-9_]+$")
      continue()
    endif()
    string(REGEX REPLACE "^plumb_" "" dep_name "${dep}")
    plumb_layer_of(theirs ${dep_name})
    if(theirs EQUAL -1)
      list(APPEND problems "plumb_${name} links plumb_${dep_name}, which has no layer: add it to PLUMB_LAYERS")
    elseif(own GREATER -1 AND NOT theirs LESS own)
      list(APPEND problems "plumb_${name} (layer ${own}) links plumb_${dep_name} (layer ${theirs}): a library may link only lower layers (docs/architecture.md, \"Layers\"). Move the code down or redraw PLUMB_LAYERS and the table together")
    endif()
  endforeach()
  set(${out} "${problems}" PARENT_SCOPE)
endfunction()
