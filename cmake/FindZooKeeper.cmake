# SPDX-License-Identifier: Apache-2.0
# FindZooKeeper: the ZooKeeper C client, multi-threaded build (libzookeeper_mt).
# Debian ships neither pkg-config nor a CMake config for it. Defines ZooKeeper::zookeeper_mt
# (with THREADED defined, which zookeeper.h needs to declare its synchronous API).
find_path(ZooKeeper_INCLUDE_DIR zookeeper/zookeeper.h)
find_library(ZooKeeper_LIBRARY NAMES zookeeper_mt)
if(ZooKeeper_INCLUDE_DIR AND EXISTS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h")
  file(STRINGS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h" _zk_ver REGEX "#define ZOO_VERSION ")
  string(REGEX REPLACE ".*\"([0-9.]+)\".*" "\\1" ZooKeeper_VERSION "${_zk_ver}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ZooKeeper
  REQUIRED_VARS ZooKeeper_LIBRARY ZooKeeper_INCLUDE_DIR
  VERSION_VAR ZooKeeper_VERSION)
if(ZooKeeper_FOUND AND NOT TARGET ZooKeeper::zookeeper_mt)
  add_library(ZooKeeper::zookeeper_mt UNKNOWN IMPORTED)
  set_target_properties(ZooKeeper::zookeeper_mt PROPERTIES
    IMPORTED_LOCATION "${ZooKeeper_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeper_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS THREADED)
endif()
mark_as_advanced(ZooKeeper_INCLUDE_DIR ZooKeeper_LIBRARY)
