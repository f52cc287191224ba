# gpupool_test(NAME SOURCES a.cpp b.cpp LIBS lib1 lib2 [LABELS l] [TIMEOUT seconds, default 300]
#              [COST n] [NORMAL_BUILD])
# Builds one gtest binary and registers it with CTest under NAME. COST: a
# long test's weight, so that a cold `ctest -j` starts it first instead of
# leaving it for last.
#
# With GPUPOOL_UNIT_TESTS off, a unit test (one without LABELS) is neither
# built by default nor registered: scripts/test.sh runs the unit tests in
# the sanitizer build only (docs/performance.md, "The test suite"). The
# target stays, because other CMakeLists.txt set its properties.
#
# NORMAL_BUILD: a long randomised property test of pure logic (the queue,
# the placement index, the simulators) runs in the normal build, always, and
# not under the sanitizers: there it took minutes of the suite's budget
# (about 460 CPU seconds for four of them, 16 s in the normal build).
function(gpupool_test name)
  cmake_parse_arguments(T "NORMAL_BUILD" "TIMEOUT;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  set(unbuilt "")
  if(T_NORMAL_BUILD)
    if(GPUPOOL_SANITIZE)
      set(unbuilt EXCLUDE_FROM_ALL)
    endif()
  elseif(NOT GPUPOOL_UNIT_TESTS AND NOT T_LABELS)
    set(unbuilt EXCLUDE_FROM_ALL)
  endif()
  add_executable(${name} ${unbuilt} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(unbuilt)
    return()
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set(labels unit)
  if(T_LABELS)
    set(labels ${T_LABELS})
  endif()
  set(timeout 300)
  if(T_TIMEOUT)
    set(timeout ${T_TIMEOUT})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout})
  if(T_COST)
    set_tests_properties(${name} PROPERTIES COST ${T_COST})
  endif()
endfunction()
