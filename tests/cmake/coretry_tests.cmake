# coretry_discover_tests(target [TEST_PREFIX p] [PROPERTIES ...])
#
# doctest_discover_tests with the guards that keep a green run honest:
# - a ctest entry whose filter ran no test case fails ("test cases: 0"), so a
#   name CMake splits or a renamed case cannot pass by running nothing;
# - a test that prints the skip marker of tests/support/skip.hpp is reported
#   as skipped, not passed;
# - a companion test, discovery.<target>, checks that every case the
#   executable lists has exactly one ctest entry and that no case name holds a
#   ';' (a list separator to CMake).
function(coretry_discover_tests target)
  cmake_parse_arguments(arg "" "TEST_PREFIX" "PROPERTIES" ${ARGN})
  doctest_discover_tests(${target}
    TEST_PREFIX "${arg_TEST_PREFIX}"
    PROPERTIES
      FAIL_REGULAR_EXPRESSION "test cases: 0 [|]"
      SKIP_REGULAR_EXPRESSION "CORETRY-SKIP:"
      ${arg_PROPERTIES})
  add_test(NAME "discovery.${target}"
    COMMAND ${CMAKE_COMMAND}
      -DEXE=$<TARGET_FILE:${target}>
      -DPREFIX=${arg_TEST_PREFIX}
      -DCTEST=${CMAKE_CTEST_COMMAND}
      -DBUILD_DIR=${CMAKE_BINARY_DIR}
      -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/check_discovery.cmake)
endfunction()

# coretry_test_suite(target SOURCES ... LIBRARIES ... [UNITY] [THREADS] [TEST_PREFIX p] [PROPERTIES ...])
#
# A suite's test executable: its sources, linked with its libraries and
# doctest's runner (coretry_doctest_main, compiled once for every suite), built with -Wall -Wextra, and its cases registered with
# coretry_discover_tests (TEST_PREFIX and PROPERTIES are passed on). What a
# suite adds (precompiled headers, definitions, more warnings) it sets on the
# target afterwards.
#
# UNITY (when CORETRY_UNITY_TESTS is on, the default): the test files are
# compiled eight to a translation unit. Their templates (async_retry,
# Beast's parsers) are then instantiated and compiled once per batch rather
# than once per file: the largest suites build in well under half the time,
# which CI's budget needs (tests/README.md, "What CI costs"). Helpers at
# file scope of such a suite must have names of their own across its files.
#
# THREADS: the suite runs code on more than one thread (std::thread, an
# io_context run by several threads, a server on a thread of the test's own,
# Asio's resolver, which resolves on a thread of its own). Its ctest entries,
# discovery.<target> included, get the label `threads`, the only tests the
# tsan preset runs, and the target joins coretry_threaded_tests, the only
# target the tsan preset builds. A suite that starts a thread without it
# fails in the dev preset (CORETRY_CHECK_THREAD_LABELS, below).
function(coretry_test_suite target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "UNITY;THREADS" "TEST_PREFIX" "SOURCES;LIBRARIES;PROPERTIES")
  add_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE ${arg_LIBRARIES} coretry_doctest_main)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(arg_UNITY AND CORETRY_UNITY_TESTS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  if(arg_THREADS)
    coretry_discover_tests(${target} TEST_PREFIX "${arg_TEST_PREFIX}" PROPERTIES ${arg_PROPERTIES} LABELS threads)
    set_tests_properties(discovery.${target} PROPERTIES LABELS threads)
    add_dependencies(coretry_threaded_tests ${target})
  elseif(CORETRY_CHECK_THREAD_LABELS)
    # Each entry runs with coretry_thread_check preloaded: a thread started
    # by the suite's code aborts it, naming the suite (thread_check.cpp).
    # Two properties of one value each: doctest_discover_tests splits a
    # value at ';', so ENVIRONMENT cannot hold both variables.
    coretry_discover_tests(${target} TEST_PREFIX "${arg_TEST_PREFIX}" PROPERTIES ${arg_PROPERTIES}
      ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:coretry_thread_check>"
      ENVIRONMENT_MODIFICATION "CORETRY_THREAD_CHECK=set:${target}")
    add_dependencies(${target} coretry_thread_check)
  else()
    coretry_discover_tests(${target} TEST_PREFIX "${arg_TEST_PREFIX}" PROPERTIES ${arg_PROPERTIES})
  endif()
endfunction()
