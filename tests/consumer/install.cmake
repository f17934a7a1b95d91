# SPDX-License-Identifier: Apache-2.0
# install.cmake: the installed consumers' fixture (CTest's consumer_install). Installs a zklock build
# into <WORK_DIR>/staging and moves it to <WORK_DIR>/prefix, so every consumer of it proves the
# install relocatable; then checks the tree: the package and the licence are there; no tests,
# examples, benchmarks or prebuilt BMIs; no text file names the build, the sources or the staging dir.
#   cmake -DBUILD_DIR=<zklock build> -DSOURCE_DIR=<zklock sources> -DWORK_DIR=... -P install.cmake
cmake_minimum_required(VERSION 3.28)
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install.cmake: -D${var}=... is required")
  endif()
endforeach()
set(staging "${WORK_DIR}/staging")
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${staging}" "${prefix}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${staging}"
  COMMAND_ERROR_IS_FATAL ANY)
file(RENAME "${staging}" "${prefix}")

file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
list(SORT installed)
list(JOIN installed "\n  " listing)
message(STATUS "installed, then moved to ${prefix}:\n  ${listing}")
foreach(expected zklock/modules/zklock.cppm zklock/zklockConfig.cmake zklock/zklockConfigVersion.cmake
                 zklock/FindZooKeeper.cmake zklock/zklockImport.cmake doc/zklock/LICENSE)  # LIBDIR may vary
  set(found "${installed}")
  list(FILTER found INCLUDE REGEX "(^|/)${expected}$")
  if(NOT found)
    message(FATAL_ERROR "install.cmake: .../${expected} is missing from the install tree")
  endif()
endforeach()
foreach(file IN LISTS installed)
  if(file MATCHES "(^|/|_)(tests?|gtest|gmock|examples?|bench|support)([/_.]|$)|_test|\\.(pcm|bmi|gcm|ifc)$")
    message(FATAL_ERROR "install.cmake: the install tree holds a file it should not: ${file}")
  endif()
  if(file MATCHES "\\.(cmake|cppm)$")
    file(READ "${prefix}/${file}" text)
    foreach(path IN ITEMS "${BUILD_DIR}" "${SOURCE_DIR}" "${staging}")
      string(FIND "${text}" "${path}" at)
      if(at GREATER -1)
        message(FATAL_ERROR "install.cmake: ${file} names ${path}: the install is not relocatable")
      endif()
    endforeach()
  endif()
endforeach()
