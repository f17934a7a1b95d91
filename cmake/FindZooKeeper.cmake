# SPDX-License-Identifier: Apache-2.0
# FindZooKeeper: the ZooKeeper C client, multi-threaded build (libzookeeper_mt).
# Debian ships neither pkg-config nor a CMake config for it. Defines ZooKeeper::zookeeper_mt (with
# THREADED defined, which zookeeper.h needs to declare its synchronous API). Components: `library`
# (enough to link) and `headers` (to compile against it); both unless asked otherwise. zklock's
# installed package asks for the library only: its users link the C client but never include it.
if(NOT ZooKeeper_FIND_COMPONENTS)
  set(ZooKeeper_FIND_COMPONENTS library headers)
  set(ZooKeeper_FIND_REQUIRED_library TRUE)
  set(ZooKeeper_FIND_REQUIRED_headers TRUE)
endif()
find_library(ZooKeeper_LIBRARY NAMES zookeeper_mt)
set(ZooKeeper_library_FOUND FALSE)
if(ZooKeeper_LIBRARY)
  set(ZooKeeper_library_FOUND TRUE)
endif()
set(ZooKeeper_headers_FOUND FALSE)
if("headers" IN_LIST ZooKeeper_FIND_COMPONENTS)
  find_path(ZooKeeper_INCLUDE_DIR zookeeper/zookeeper.h)
  if(ZooKeeper_INCLUDE_DIR)
    set(ZooKeeper_headers_FOUND TRUE)
  endif()
endif()
if(ZooKeeper_headers_FOUND AND EXISTS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h")
  file(STRINGS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h" _zk_ver REGEX "#define ZOO_VERSION ")
  string(REGEX REPLACE ".*\"([0-9.]+)\".*" "\\1" ZooKeeper_VERSION "${_zk_ver}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ZooKeeper
  REQUIRED_VARS ZooKeeper_LIBRARY
  VERSION_VAR ZooKeeper_VERSION
  HANDLE_COMPONENTS)
if(ZooKeeper_FOUND AND NOT TARGET ZooKeeper::zookeeper_mt)
  add_library(ZooKeeper::zookeeper_mt UNKNOWN IMPORTED)
  set_target_properties(ZooKeeper::zookeeper_mt PROPERTIES IMPORTED_LOCATION "${ZooKeeper_LIBRARY}")
  if(ZooKeeper_headers_FOUND)
    set_target_properties(ZooKeeper::zookeeper_mt PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeper_INCLUDE_DIR}"
      INTERFACE_COMPILE_DEFINITIONS THREADED)
  endif()
endif()
mark_as_advanced(ZooKeeper_INCLUDE_DIR ZooKeeper_LIBRARY)
