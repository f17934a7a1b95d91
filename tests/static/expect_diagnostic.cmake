# SPDX-License-Identifier: Apache-2.0
# expect_diagnostic.cmake: builds one probe target of the build tree and checks the compiler's
# verdict. With MESSAGE, the build must fail and print MESSAGE (a regex), COUNT times if COUNT is
# given; without it (a control), the build must succeed.
#   cmake -DBUILD_DIR=... -DTARGET=... [-DMESSAGE=regex [-DCOUNT=n]] -P expect_diagnostic.cmake
cmake_minimum_required(VERSION 3.28)
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT MESSAGE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expect_diagnostic: the control ${TARGET} does not compile")
  endif()
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "expect_diagnostic: ${TARGET} compiled; it must be refused with '${MESSAGE}'")
endif()
string(REGEX MATCHALL "${MESSAGE}" found "${out}")
list(LENGTH found n)
if(n EQUAL 0 OR (COUNT AND NOT n EQUAL COUNT))
  message(FATAL_ERROR "expect_diagnostic: ${TARGET} was refused, but with ${n} times '${MESSAGE}' "
                      "(expected ${COUNT})")
endif()
message(STATUS "expect_diagnostic: ${TARGET} refused with '${MESSAGE}' (${n} times)")
