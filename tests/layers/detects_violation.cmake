# ctest layers_detects_violation: cmake/check_layers.cmake, run over the small tree in fixture/,
# must fail and report exactly the violations planted there (expected.txt: upward includes, quoted
# and as public <graphtensor/...> headers, a file under framework/ or include/graphtensor/ in no
# layer folder, an include of an old framework/ path) and nothing about fixture/models/good.cc,
# whose includes all point down.
#   cmake -DCHECK=cmake/check_layers.cmake -P tests/layers/detects_violation.cmake
cmake_minimum_required(VERSION 3.25)
set(fixture "${CMAKE_CURRENT_LIST_DIR}/fixture")
execute_process(COMMAND "${CMAKE_COMMAND}" -DGT_ROOT=${fixture} -P "${CHECK}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "check_layers passed a tree with planted upward includes:\n${out}${err}")
endif()
# The violation lines (file:line: ...) of the output, against the expected ones.
string(REPLACE ";" "," err "${err}")
string(REPLACE "\n" ";" lines "${err}")
list(FILTER lines INCLUDE REGEX "^[^ ]+:[0-9]+: ")
file(STRINGS "${fixture}/expected.txt" expected)
if(NOT lines STREQUAL expected)
  string(REPLACE ";" "\n  " got "${lines}")
  string(REPLACE ";" "\n  " want "${expected}")
  message(FATAL_ERROR "check_layers reported\n  ${got}\nexpected\n  ${want}\n(full output:\n${err})")
endif()
list(LENGTH expected n)
message(STATUS "layers_detects_violation: check_layers failed and reported the ${n} planted violations")
