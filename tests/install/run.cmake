# Consumer tests: a user's project uses coretry the way MODE says.
#   find_package   install the built coretry into a scratch prefix, then build
#                  and run ./CMakeLists.txt against it
#   components     install, then configure components/ with several COMPONENTS
#                  lists, an unknown component among them
#   pkg_config     install, then compile one-file programs with the flags
#                  pkg-config gives for coretry's .pc files
#   add_subdirectory
#                  build subdirectory/, which builds coretry (header-only)
#                  from SOURCE_TREE itself, and run its programs
#   fetchcontent   configure fetchcontent/, which takes coretry from
#                  SOURCE_TREE with FetchContent and CORETRY_BUILD_HTTP=OFF
#                  and checks what that defines, looks for and links
# Inputs: MODE, BUILD_DIR, SOURCE_DIR (this directory), SOURCE_TREE (coretry's
# top level), WORK_DIR, CXX_COMPILER, CXX_FLAGS, LINKER_FLAGS, BUILD_TYPE,
# LAUNCHER, SEPARATE_COMPILATION.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK_DIR}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(install_coretry)
  run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
endfunction()

# Configures and builds the consumer project in `source`, with the flags of
# the build under test. TARGETS: build only these (and what they link), not
# the whole project; DEBUG_FLAGS: CMAKE_CXX_FLAGS_DEBUG instead of CMake's
# default -g; CONFIGURE_ONLY: configure and generate, build nothing. The rest
# of the arguments go to the configure step.
function(build_consumer source)
  cmake_parse_arguments(PARSE_ARGV 1 arg "CONFIGURE_ONLY" "DEBUG_FLAGS" "TARGETS")
  set(args -S "${source}" -B "${WORK_DIR}/build" -G Ninja
      "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
      "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}" ${arg_UNPARSED_ARGUMENTS})
  if(DEFINED arg_DEBUG_FLAGS)
    list(APPEND args "-DCMAKE_CXX_FLAGS_DEBUG=${arg_DEBUG_FLAGS}")
  endif()
  if(LAUNCHER)
    list(APPEND args "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
  endif()
  run("configuring the consumer" "${CMAKE_COMMAND}" ${args})
  if(arg_CONFIGURE_ONLY)
    return()
  endif()
  set(targets "")
  if(arg_TARGETS)
    set(targets --target ${arg_TARGETS})
  endif()
  run("building the consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" ${targets})
endfunction()

# Runs the consumers' programs and checks what they print.
function(check_engine_consumer program)
  run("${program}" "${program}")
  message(STATUS "engine consumer said: ${out}")
  if(NOT out MATCHES "succeeded after 2 attempts, value 42, 70 ms virtual" OR
     NOT out MATCHES "metrics: 2 attempts counted")
    message(FATAL_ERROR "the engine consumer did not run as expected:\n${out}")
  endif()
endfunction()
function(check_http_consumer program)
  run("${program}" "${program}")
  message(STATUS "consumer said: ${out}")
  if(NOT out MATCHES "succeeded after 2 attempts")
    message(FATAL_ERROR "the consumer did not run as expected:\n${out}")
  endif()
endfunction()

if(MODE STREQUAL "find_package")
  install_coretry()
  file(GLOB licence "${WORK_DIR}/prefix/share/doc/coretry/LICENSE")
  if(NOT licence)
    message(FATAL_ERROR "the install has no share/doc/coretry/LICENSE")
  endif()
  build_consumer("${SOURCE_DIR}/find_package" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
                 "-DEXPECT_SEPARATE_COMPILATION=${SEPARATE_COMPILATION}")
  check_http_consumer("${WORK_DIR}/build/consumer")
  check_engine_consumer("${WORK_DIR}/build/engine_consumer")

elseif(MODE STREQUAL "components")
  install_coretry()
  set(all coretry::coretry coretry::net coretry::http coretry::testing coretry::prometheus coretry::redis)
  foreach(ask IN ITEMS "testing" "prometheus" "net" "http" "testing|http" "redis")
    string(REPLACE "|" ";" ask_list "${ask}")
    set(expect coretry::coretry)
    foreach(component IN LISTS ask_list)
      if(component STREQUAL "http" OR component STREQUAL "redis")
        list(APPEND expect coretry::net) # their TLS and addresses
      endif()
      list(APPEND expect coretry::${component})
    endforeach()
    set(absent ${all})
    list(REMOVE_ITEM absent ${expect})
    file(REMOVE_RECURSE "${WORK_DIR}/build")
    string(REPLACE ";" "\\;" ask_arg "${ask_list}")
    string(REPLACE ";" "\\;" expect_arg "${expect}")
    string(REPLACE ";" "\\;" absent_arg "${absent}")
    run("find_package(coretry COMPONENTS ${ask_list})"
        "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/components" -B "${WORK_DIR}/build" -G Ninja
        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DASK=${ask_arg}"
        "-DEXPECT_TARGETS=${expect_arg}" "-DEXPECT_ABSENT=${absent_arg}")
  endforeach()
  # An unknown component is refused, and named.
  file(REMOVE_RECURSE "${WORK_DIR}/build")
  execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/components" -B "${WORK_DIR}/build" -G Ninja
                          "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DASK=testing;tracing"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "coretry has no component \"tracing\"")
    message(FATAL_ERROR "find_package(coretry COMPONENTS tracing) was not refused by name (${rc}):\n${out}\n${err}")
  endif()

elseif(MODE STREQUAL "pkg_config")
  install_coretry()
  find_program(PKG_CONFIG pkg-config REQUIRED)
  file(GLOB pc_files "${WORK_DIR}/prefix/*/pkgconfig/coretry.pc" "${WORK_DIR}/prefix/*/*/pkgconfig/coretry.pc")
  list(LENGTH pc_files found)
  if(NOT found EQUAL 1)
    message(FATAL_ERROR "expected one installed coretry.pc, found: ${pc_files}")
  endif()
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  if(SEPARATE_COMPILATION)
    set(expect 1)
  else()
    set(expect 0)
  endif()
  separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
  separate_arguments(linker_flags UNIX_COMMAND "${LINKER_FLAGS}")
  foreach(program IN ITEMS engine_consumer consumer)
    if(program STREQUAL "consumer")
      set(packages coretry coretry-http)
    else()
      set(packages coretry coretry-testing coretry-prometheus)
    endif()
    run("pkg-config --cflags --libs ${packages}" "${PKG_CONFIG}" --cflags --libs ${packages})
    string(STRIP "${out}" flags)
    message(STATUS "pkg-config ${packages}: ${flags}")
    if(NOT flags MATCHES "-I${WORK_DIR}/prefix/")
      message(FATAL_ERROR "pkg-config does not point into the install prefix: ${flags}")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    file(MAKE_DIRECTORY "${WORK_DIR}/bin")
    run("compiling ${program}.cpp with pkg-config's flags"
        "${CXX_COMPILER}" -std=c++20 ${cxx_flags} "-DEXPECT_SEPARATE_COMPILATION=${expect}"
        "${SOURCE_DIR}/${program}.cpp" -o "${WORK_DIR}/bin/${program}" ${flags} ${linker_flags})
  endforeach()
  check_engine_consumer("${WORK_DIR}/bin/engine_consumer")
  check_http_consumer("${WORK_DIR}/bin/consumer")

elseif(MODE STREQUAL "add_subdirectory")
  # coretry built again inside the user's build, header-only, with the HTTP
  # client. What this checks is how coretry behaves as a subproject (no
  # separate compilation imposed, its targets usable from the build tree),
  # so it builds the two programs and what they link, nothing else of
  # coretry's (not coretry::redis), and without debug information (-g0 as a
  # Debug build's flags; the flags of the build under test otherwise).
  build_consumer("${SOURCE_DIR}/subdirectory" "-DCORETRY_SOURCE_DIR=${SOURCE_TREE}"
                 TARGETS consumer engine_consumer DEBUG_FLAGS "-g0")
  check_http_consumer("${WORK_DIR}/build/consumer")
  check_engine_consumer("${WORK_DIR}/build/engine_consumer")

elseif(MODE STREQUAL "fetchcontent")
  # Configures and generates only. What this mode checks happens there:
  # FetchContent takes coretry with CORETRY_BUILD_HTTP=OFF, which must look
  # for neither OpenSSL nor Boost.URL, define no coretry::http and link
  # neither from the engine's targets (fetchcontent/CMakeLists.txt), and the
  # engine consumer's targets must resolve. Building would compile coretry's
  # engine, testing and prometheus libraries from the sources, with the
  # definitions and options, that the build under test compiles them with
  # (CORETRY_BUILD_HTTP changes nothing in them), and link
  # and run the engine consumer the way find_package_consumer does, against
  # build-tree targets the way add_subdirectory_consumer does.
  build_consumer("${SOURCE_DIR}/fetchcontent" "-DCORETRY_SOURCE_DIR=${SOURCE_TREE}" CONFIGURE_ONLY)

else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
