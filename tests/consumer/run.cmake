# SPDX-License-Identifier: Apache-2.0
# run.cmake: configure, build and run one consumer project of tests/consumer from scratch, as its
# users would, with zklock's compiler (and sanitizers), warnings on; or check that it is refused.
#   cmake -DWAY=installed|subproject|fetchcontent -DWORK_DIR=... -DCXX=...
#         [-DPROJECT=<project dir here; default: WAY>] [-DPREFIX=<installed zklock>]
#         [-DSOURCE_DIR=<zklock sources>] [-DFORBIDDEN_PATH=<where the prefix was installed>]
#         [-DSCAN_DEPS=...] [-DMAKE_PROGRAM=...] [-DBUILD_TYPE=...] [-DSANITIZE=...]
#         [-DEXPECT_MODE=<mode of zklock's BMIs, e.g. gnu++20>] [-DEXPECT_REFUSAL=<regex>]
#         [-DCONFIGURE_ONLY=ON] -P run.cmake [-- <more arguments for the consumer's configure step>]
# A run (ZKLOCK_TEST_ZK set) must lock; a refusal must stop the configure step with one error;
# CONFIGURE_ONLY stops after the configure step's checks (a row whose build another row makes).
cmake_minimum_required(VERSION 3.28)
foreach(var WAY WORK_DIR CXX)
  if(NOT ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT PROJECT)
  set(PROJECT ${WAY})
endif()
set(more "")  # the arguments after --
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(found_dashes)
    list(APPEND more "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(found_dashes TRUE)
  endif()
endforeach()
get_filename_component(name "${WORK_DIR}" NAME)
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")

# 1. Configure: the user's generator, compiler and flags, then how this way finds zklock.
set(args -S "${CMAKE_CURRENT_LIST_DIR}/${PROJECT}" -B "${build}" "-DCMAKE_CXX_COMPILER=${CXX}")
if(NOT "-G" IN_LIST more)
  list(APPEND args -G Ninja)
  if(MAKE_PROGRAM)
    list(APPEND args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
endif()
if(SCAN_DEPS)
  list(APPEND args "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}")
endif()
if(BUILD_TYPE)
  list(APPEND args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
set(flags "-Wall -Wextra -Wpedantic")
if(SANITIZE)  # an instrumented zklock needs an instrumented program, linked with the runtime
  string(APPEND flags " -fsanitize=${SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all")
  list(APPEND args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
list(APPEND args "-DCMAKE_CXX_FLAGS=${flags}")
if(WAY STREQUAL "installed")
  # find_package(zklock) must need nothing its users never include: range-v3 is made unfindable.
  list(APPEND args "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DCMAKE_DISABLE_FIND_PACKAGE_range-v3=ON")
elseif(WAY STREQUAL "subproject")
  list(APPEND args "-DZKLOCK_SOURCE_DIR=${SOURCE_DIR}")
elseif(WAY STREQUAL "fetchcontent")
  # The sources' commit, with their uncommitted changes to tracked files (git stash create makes a
  # commit of them without touching the work tree or any ref; a local clone copies it too).
  find_program(GIT git REQUIRED)
  execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" -c user.name=zklock-tests -c user.email=tests@invalid
                          stash create
    OUTPUT_VARIABLE tag OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  if(NOT tag)
    execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" rev-parse HEAD
      OUTPUT_VARIABLE tag OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  endif()
  message(STATUS "fetching zklock from ${SOURCE_DIR} at ${tag} (untracked files are not in it)")
  list(APPEND args "-DZKLOCK_GIT=${SOURCE_DIR}" "-DZKLOCK_GIT_TAG=${tag}")
else()
  message(FATAL_ERROR "run.cmake: WAY must be installed, subproject or fetchcontent, not '${WAY}'")
endif()
list(APPEND args ${more})
list(JOIN args "' '" shown)
message(STATUS "cmake '${shown}'")
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")

if(EXPECT_REFUSAL)
  string(REGEX MATCHALL "CMake Error" errors "${out}")
  list(LENGTH errors count)
  if(rc EQUAL 0 OR NOT count EQUAL 1 OR NOT out MATCHES "${EXPECT_REFUSAL}")
    message(FATAL_ERROR "run.cmake: expected the configure step to fail with one error matching "
                        "'${EXPECT_REFUSAL}'; it exited ${rc} with ${count} errors")
  endif()
  message(STATUS "refused, with one clear message, as expected")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "run.cmake: configuring the consumer failed")
endif()
if(EXPECT_MODE)
  string(FIND "${out}" "zklock: module interface compiled as ${EXPECT_MODE}," at)
  if(at EQUAL -1)
    message(FATAL_ERROR "run.cmake: zklock's module interface is not compiled as ${EXPECT_MODE}")
  endif()
endif()
file(READ "${build}/CMakeCache.txt" cache)
if(WAY STREQUAL "installed" AND cache MATCHES "ZooKeeper_INCLUDE_DIR|range-v3_DIR")
  message(FATAL_ERROR "run.cmake: find_package(zklock) looked for headers its users never include")
endif()

file(READ "${build}/build.ninja" ninja)
if(FORBIDDEN_PATH)
  string(FIND "${ninja}${cache}" "${FORBIDDEN_PATH}" at)
  if(at GREATER -1)
    message(FATAL_ERROR "run.cmake: the consumer's build names ${FORBIDDEN_PATH}")
  endif()
endif()

# 2. As a subproject, zklock builds its library only, and the parent's cmake --install installs
#    nothing of zklock's (asked before the build: an install rule of zklock's would fail it too).
if(NOT WAY STREQUAL "installed")
  if(ninja MATCHES "zklock_cli|unit_tests|example_tour|peer_runner")
    message(FATAL_ERROR "run.cmake: the subproject builds more than the library")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${build}" --prefix "${WORK_DIR}/install"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  file(GLOB_RECURSE installed "${WORK_DIR}/install/*")
  if(NOT rc EQUAL 0 OR installed)
    message(FATAL_ERROR "run.cmake: the parent's cmake --install tried to install zklock's files:\n${out}${installed}")
  endif()
endif()
if(CONFIGURE_ONLY)
  message(STATUS "configured as expected (this row builds nothing: another row builds the same code in this way)")
  return()
endif()

# 3. Build: no warning at all (zklock's module interface and, as a subproject, its library are
#    compiled here with the consumer's flags).
# At nice 10: the fault suites may run beside the consumers (tests/CMakeLists.txt) and keep their CPU.
find_program(NICE nice)
set(niced "")
if(NICE)
  set(niced "${NICE}" -n 10)
endif()
execute_process(COMMAND ${niced} "${CMAKE_COMMAND}" --build "${build}" --parallel 2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "run.cmake: building the consumer failed")
endif()
if(out MATCHES "warning:")
  message(FATAL_ERROR "run.cmake: the consumer's build printed warnings")
endif()

# 4. Run it against the fixture's server: a mutex and a read lock, both seen on the server.
execute_process(COMMAND "${build}/zklock_consumer" "${name}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "zklock_consumer exited ${rc}\nstdout: ${out}stderr: ${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "^mutex token [1-9][0-9]*, read token [1-9][0-9]*\n$")
  message(FATAL_ERROR "run.cmake: zklock_consumer failed")
endif()
