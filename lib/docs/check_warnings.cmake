# Runs doxygen on the configured Doxyfile and fails when it reports any
# warning: with undocumented members not reported (WARN_IF_UNDOCUMENTED = NO),
# what is left are broken references, unknown commands and wrong parameter
# names, each a mistake in a comment.
file(REMOVE ${LOG})
execute_process(COMMAND ${DOXYGEN} ${DOXYFILE}
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "doxygen failed (${status}):\n${out}${err}")
endif()
if(NOT EXISTS ${LOG})
  message(FATAL_ERROR "doxygen wrote no warning log at ${LOG}")
endif()
file(STRINGS ${LOG} lines)
set(warnings "")
foreach(line IN LISTS lines)
  # Doxygen cannot place the specialisations of Boost's traits that declare
  # coretry's error enums (is_error_code_enum) in a Boost scope it never saw:
  # that is doxygen's limit, not a mistake in a comment.
  if(line MATCHES "Internal inconsistency: scope for class boost::system::is_error_(code|condition)_enum<")
    continue()
  endif()
  string(STRIP "${line}" line)
  if(NOT line STREQUAL "")
    string(APPEND warnings "${line}\n")
  endif()
endforeach()
if(NOT warnings STREQUAL "")
  message(FATAL_ERROR "doxygen warnings in the API reference:\n${warnings}")
endif()
message(STATUS "API reference built without warnings")
