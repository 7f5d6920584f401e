# cmake -P tests/cmake/layers_test.cmake: the layer check of cmake/PlumbLayers.cmake refuses a
# sideways or upward link and a library without a layer, and accepts downward links. ctest runs it
# as CMake.Layers.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/PlumbLayers.cmake)

set(PLUMB_LAYERS "core" "stats net" "metrics protocol" "compare")
set(failures 0)

function(expect label want name)
  plumb_layer_violations(problems ${name} ${ARGN})
  list(LENGTH problems n)
  if(NOT n EQUAL want)
    message(SEND_ERROR "${label}: expected ${want} violation(s), got ${n}: ${problems}")
  else()
    message(STATUS "ok: ${label}")
  endif()
endfunction()

expect("downward links pass" 0 compare plumb_core plumb_net plumb_protocol Boost::json plumb_warnings)
expect("a leaf with no plumb_ deps passes" 0 core Threads::Threads)
expect("an upward link is refused" 1 stats plumb_core plumb_compare)
expect("a link within one layer is refused" 1 metrics plumb_stats plumb_protocol)
expect("a dependency without a layer is refused" 1 compare plumb_executor)
expect("a library without a layer is refused" 1 executor plumb_core)
plumb_layer_violations(problems stats plumb_compare)
if(NOT problems MATCHES "plumb_stats \\(layer 1\\) links plumb_compare \\(layer 3\\)")
  message(SEND_ERROR "the message names both libraries and their layers: ${problems}")
endif()
