# Runs one fuzzer for a bounded time, for CTest.
#   cmake -DFUZZER=... -DCORPUS=... -DSCRATCH=... -DOPTIONS=a|b|c -P run_fuzzer.cmake
# The committed seed corpus is copied to SCRATCH first: libFuzzer adds the
# inputs it finds to its corpus directory, and the source tree must stay as
# committed. Fails, naming the reproducer, if the fuzzer reports anything.

foreach(required FUZZER CORPUS SCRATCH)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${required}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH}/corpus ${SCRATCH}/artifacts)
file(GLOB seeds ${CORPUS}/*)
if(NOT seeds)
  message(FATAL_ERROR "no seed inputs in ${CORPUS}")
endif()
file(COPY ${seeds} DESTINATION ${SCRATCH}/corpus)

string(REPLACE "|" ";" options "${OPTIONS}")
execute_process(
  COMMAND ${FUZZER} ${options} -artifact_prefix=${SCRATCH}/artifacts/ ${SCRATCH}/corpus
  RESULT_VARIABLE result
  COMMAND_ECHO STDOUT)

if(NOT result EQUAL 0)
  file(GLOB artifacts ${SCRATCH}/artifacts/*)
  string(REPLACE ";" "\n  " artifact_list "${artifacts}")
  message(FATAL_ERROR "${FUZZER} failed (${result}); reproduce with:\n  ${FUZZER} <artifact>\n"
                      "artifacts:\n  ${artifact_list}")
endif()
