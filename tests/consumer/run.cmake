# SPDX-License-Identifier: Apache-2.0
# run.cmake: install a zklock build into a fresh prefix, build this consumer project against it
# with the same compiler (and sanitizers), run it. Used by CTest's consumer_project test:
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCXX=... [-DSCAN_DEPS=...] [-DMAKE_PROGRAM=...]
#         [-DBUILD_TYPE=...] [-DSANITIZE=...] -P run.cmake        (ZKLOCK_TEST_ZK set in the environment)
cmake_minimum_required(VERSION 3.28)
foreach(var BUILD_DIR WORK_DIR CXX)
  if(NOT ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED ENV{ZKLOCK_TEST_ZK})
  message(FATAL_ERROR "run.cmake: ZKLOCK_TEST_ZK is not set (run through tools/zk env)")
endif()
set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${prefix}" "${consumer_build}")

# 1. Install.
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}"
  COMMAND_ERROR_IS_FATAL ANY)

# 2. The install tree holds the package: no tests, examples, benchmarks or prebuilt BMIs.
file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
list(SORT installed)
list(JOIN installed "\n  " listing)
message(STATUS "installed:\n  ${listing}")
foreach(expected zklock/modules/zklock.cppm zklock/zklockConfig.cmake
                 zklock/zklockConfigVersion.cmake zklock/FindZooKeeper.cmake)  # LIBDIR may vary
  set(found "${installed}")
  list(FILTER found INCLUDE REGEX "(^|/)${expected}$")
  if(NOT found)
    message(FATAL_ERROR "run.cmake: .../${expected} is missing from the install tree")
  endif()
endforeach()
foreach(file IN LISTS installed)
  if(file MATCHES "(^|/|_)(tests?|gtest|gmock|examples?|bench|support)([/_.]|$)|_test|\\.(pcm|bmi|gcm|ifc)$")
    message(FATAL_ERROR "run.cmake: the install tree holds a file it should not: ${file}")
  endif()
endforeach()

# 3. Configure and build the consumer the way a user would, with the same toolchain.
set(args -S "${CMAKE_CURRENT_LIST_DIR}" -B "${consumer_build}" -G Ninja
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX}")
if(SCAN_DEPS)
  list(APPEND args "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}")
endif()
if(MAKE_PROGRAM)
  list(APPEND args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(BUILD_TYPE)
  list(APPEND args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(SANITIZE)  # the installed library is instrumented: the consumer must be too, and link the runtime
  list(APPEND args
    "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all"
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${consumer_build}" COMMAND_ERROR_IS_FATAL ANY)

# 4. Run it against the fixture's server: it must lock and print a fencing token.
execute_process(COMMAND "${consumer_build}/zklock_consumer"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "zklock_consumer exited ${rc}\nstdout: ${out}stderr: ${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "^fencing token [1-9][0-9]*\n$")
  message(FATAL_ERROR "run.cmake: zklock_consumer failed")
endif()
