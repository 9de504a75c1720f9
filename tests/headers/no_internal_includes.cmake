# Fails when a public header under INCLUDE_DIR includes one of Asio's or
# Beast's detail headers (boost/asio/detail/..., boost/beast/.../detail/...):
# those are the libraries' internals, not their interface.
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/*.hpp" "${INCLUDE_DIR}/*.h" "${INCLUDE_DIR}/*.ipp")
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "no public headers found under ${INCLUDE_DIR}")
endif()
set(found "")
foreach(header IN LISTS headers)
  file(STRINGS "${INCLUDE_DIR}/${header}" lines
       REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]boost/(asio/detail/|beast/([^>\"]*/)?detail/)")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    string(APPEND found "\n  ${header}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "public headers include Asio's or Beast's internals:${found}")
endif()
message(STATUS "${count} public headers checked: no Asio or Beast detail includes")
