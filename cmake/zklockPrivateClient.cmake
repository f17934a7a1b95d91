# SPDX-License-Identifier: Apache-2.0
# zklock's private copy of the ZooKeeper C client, single-threaded build (libzookeeper_st.a).
#
# Why: a session runs its own I/O loop (modules/session/io_loop.cpp): one thread polls the socket,
# reads replies and runs their completions, and a request is written to the socket by the thread
# that makes it. The multi-threaded client (libzookeeper_mt) starts two threads of its own per
# handle and hands every request and reply across them, which on two cores cost most of zklock's
# client CPU. The two builds define the same symbols, so a program cannot link both: here every
# global symbol of the static single-threaded client is renamed (prefix `zklock_zk_`), and a
# generated header (zklock_zk_names.h) maps the C API's names to the renamed ones for zklock's
# implementation units only. Your program, its tests and our own test support keep the C client
# they link (libzookeeper_mt) without a clash.
#
# The archive comes from Debian's libzookeeper-st-dev, unpacked (not installed: it conflicts with
# libzookeeper-mt-dev) by tools/setup to /opt/zklock/libzookeeper-st-dev; its headers are the
# -mt package's (one source package, one version).
#
# Defines: zklock_zookeeper_st (an imported static library: the renamed archive, with the C
# client's include directory), ZKLOCK_PRIVATE_CLIENT_ARCHIVE (its path, to install),
# ZKLOCK_HAVE_TLS / ZKLOCK_HAVE_SASL / ZKLOCK_HAVE_SET_DATA_WATCHES / ZKLOCK_HAVE_MULTI_CONTAINER /
# ZKLOCK_HAVE_LISTING_NAMES
# (ON or OFF) and ZKLOCK_CLIENT_DESCRIPTION (which client).
#
# Which client: Debian's (no TLS, no SASL: Debian 12 builds it without OpenSSL and Cyrus SASL) or
# the one tools/build-zookeeper-client builds from Debian's source package with both
# (`tools/setup --with-tls-sasl`). ZKLOCK_ZOOKEEPER_CLIENT: "auto" (the capable one where it is
# installed, else Debian's), "debian", or "tls-sasl" (that one, or a configure error).
set(ZKLOCK_ZOOKEEPER_ST_ROOT /opt/zklock/libzookeeper-st-dev CACHE PATH
  "Where tools/setup unpacked Debian's libzookeeper-st-dev (the static single-threaded C client)")
set(ZKLOCK_TLS_SASL_CLIENT_ROOT /opt/zklock/zookeeper-client-tls-sasl CACHE PATH
  "Where tools/setup --with-tls-sasl installed the C client built with TLS and SASL")
set(ZKLOCK_ZOOKEEPER_CLIENT auto CACHE STRING "The C client zklock builds on: auto, debian or tls-sasl")
set_property(CACHE ZKLOCK_ZOOKEEPER_CLIENT PROPERTY STRINGS auto debian tls-sasl)
if(NOT ZKLOCK_ZOOKEEPER_CLIENT MATCHES "^(auto|debian|tls-sasl)$")
  message(FATAL_ERROR "zklock: ZKLOCK_ZOOKEEPER_CLIENT is '${ZKLOCK_ZOOKEEPER_CLIENT}': say auto, debian or tls-sasl")
endif()
set(_zk_capable ${ZKLOCK_TLS_SASL_CLIENT_ROOT}/lib/libzookeeper_st.a)
if(ZKLOCK_ZOOKEEPER_CLIENT STREQUAL "tls-sasl" AND NOT EXISTS ${_zk_capable})
  message(FATAL_ERROR "zklock: ZKLOCK_ZOOKEEPER_CLIENT=tls-sasl, but ${_zk_capable} is missing. "
    "Run tools/setup --with-tls-sasl: it builds the C client with TLS and SASL from Debian's source package.")
endif()
set(ZKLOCK_HAVE_TLS OFF)
set(ZKLOCK_HAVE_SASL OFF)
set(ZKLOCK_HAVE_SET_DATA_WATCHES OFF)
set(ZKLOCK_HAVE_MULTI_CONTAINER OFF)
set(ZKLOCK_HAVE_LISTING_NAMES OFF)
set(ZKLOCK_HAVE_ENDPOINT_PER_THREAD OFF)
if(NOT ZKLOCK_ZOOKEEPER_CLIENT STREQUAL "debian" AND EXISTS ${_zk_capable})
  set(ZKLOCK_ZOOKEEPER_ST_ARCHIVE ${_zk_capable})
  file(STRINGS ${ZKLOCK_TLS_SASL_CLIENT_ROOT}/features _zk_features)
  file(STRINGS ${ZKLOCK_TLS_SASL_CLIENT_ROOT}/version _zk_version)  # "<Debian version> recipe <n>"
  string(REPLACE " recipe " ", zklock's patches r" _zk_version "${_zk_version}")
  # Its features file names what it can do: TLS, SASL, and zklock's additions (one request for a
  # waiter's watches; a container's create result in a transaction; a listing's names in one allocation;
  # a server's address formatted in a buffer per thread).
  string(REPLACE " " ";" _zk_features "${_zk_features}")
  foreach(_word IN ITEMS tls sasl set-data-watches multi-container listing-names endpoint-per-thread)
    string(TOUPPER "${_word}" _var)
    string(REPLACE "-" "_" _var "ZKLOCK_HAVE_${_var}")
    if(_word IN_LIST _zk_features)
      set(${_var} ON)
    endif()
  endforeach()
  unset(_word)
  unset(_var)
  find_package(OpenSSL REQUIRED)
  find_library(ZKLOCK_SASL2_LIBRARY NAMES sasl2 REQUIRED)
  set(ZKLOCK_CLIENT_DESCRIPTION "built from Debian's source package ${_zk_version} (${ZKLOCK_TLS_SASL_CLIENT_ROOT})")
else()
  find_library(ZKLOCK_ZOOKEEPER_ST_ARCHIVE NAMES libzookeeper_st.a
    HINTS ${ZKLOCK_ZOOKEEPER_ST_ROOT}/usr/lib/x86_64-linux-gnu ${ZKLOCK_ZOOKEEPER_ST_ROOT}/usr/lib NO_CACHE)
  if(NOT ZKLOCK_ZOOKEEPER_ST_ARCHIVE)
    message(FATAL_ERROR "zklock: no libzookeeper_st.a (the single-threaded ZooKeeper C client, static). "
      "Run tools/setup: it unpacks Debian's libzookeeper-st-dev to ${ZKLOCK_ZOOKEEPER_ST_ROOT}.")
  endif()
  file(STRINGS ${ZKLOCK_ZOOKEEPER_ST_ROOT}/version _zk_version)
  set(ZKLOCK_CLIENT_DESCRIPTION "Debian's libzookeeper-st-dev ${_zk_version}")
endif()
unset(_zk_capable)
set(_zk_features "TLS no, SASL no, none of zklock's additions (tools/setup builds zklock's client, which has them)")
if(ZKLOCK_HAVE_TLS AND ZKLOCK_HAVE_SASL)
  set(_zk_features "TLS yes, SASL yes")
endif()
if(ZKLOCK_HAVE_SET_DATA_WATCHES AND ZKLOCK_HAVE_MULTI_CONTAINER)
  string(APPEND _zk_features "; fewer requests per acquire (zklock's additions: a waiter's watches in one request, "
    "a fresh lock node and its contender in one transaction)")
endif()
message(STATUS "zklock: ZooKeeper C client: ${ZKLOCK_CLIENT_DESCRIPTION}; ${_zk_features}")
unset(_zk_features)
find_program(ZKLOCK_NM NAMES llvm-nm-19 llvm-nm nm REQUIRED)
find_program(ZKLOCK_OBJCOPY NAMES llvm-objcopy-19 llvm-objcopy objcopy REQUIRED)

set(_zk_dir ${PROJECT_BINARY_DIR}/zklock-private-client)
set(ZKLOCK_PRIVATE_CLIENT_ARCHIVE ${_zk_dir}/libzklock_zookeeper_st.a)
file(MAKE_DIRECTORY ${_zk_dir})
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE})
file(SHA256 ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE} _zk_sum)
string(APPEND _zk_sum "-recipe4")  # bump when what is done to the archive changes
if(NOT EXISTS ${ZKLOCK_PRIVATE_CLIENT_ARCHIVE} OR NOT "${_zk_sum}" STREQUAL "${ZKLOCK_PRIVATE_CLIENT_SOURCE_SUM}")
  execute_process(COMMAND ${ZKLOCK_NM} -g --defined-only ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE}
    OUTPUT_VARIABLE _zk_nm RESULT_VARIABLE _zk_rc ERROR_VARIABLE _zk_err)
  if(NOT _zk_rc EQUAL 0)
    message(FATAL_ERROR "zklock: ${ZKLOCK_NM} failed on ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE}: ${_zk_err}")
  endif()
  # Lines "<address> <type> <name>": every defined global symbol, functions and data alike.
  string(REGEX MATCHALL "[0-9a-fA-F]+ [A-Za-z] [A-Za-z_][A-Za-z0-9_]*" _zk_lines "${_zk_nm}")
  set(_zk_names)
  foreach(_line IN LISTS _zk_lines)
    string(REGEX REPLACE "^[0-9a-fA-F]+ [A-Za-z] " "" _name "${_line}")
    list(APPEND _zk_names ${_name})
  endforeach()
  list(REMOVE_DUPLICATES _zk_names)
  list(LENGTH _zk_names _zk_count)
  if(_zk_count LESS 100)
    message(FATAL_ERROR "zklock: found only ${_zk_count} symbols in ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE}")
  endif()
  # Every symbol is renamed in the archive; the header maps only the names the C client's public
  # headers declare (a #define of an internal name such as `hash` would rename std::hash).
  file(GLOB _zk_public_headers ${ZooKeeper_INCLUDE_DIR}/zookeeper/*.h)
  set(_zk_public "")
  foreach(_h IN LISTS _zk_public_headers)
    file(READ ${_h} _text)
    string(APPEND _zk_public " ${_text} ")
  endforeach()
  string(REGEX MATCHALL "[A-Za-z_][A-Za-z0-9_]*" _zk_words "${_zk_public}")
  list(REMOVE_DUPLICATES _zk_words)
  set(_zk_header "// Generated by cmake/zklockPrivateClient.cmake: the C client's names in zklock's private copy.\n#pragma once\n")
  # The client's one call of send(2) (zookeeper_send) goes to zklock's (handle.cpp), which writes a
  # request's length prefix with MSG_MORE so that it leaves in one packet with the request (and holds
  # the writes of a batch of the loop's completions); its close(2) goes to zklock's too, which
  # forgets a socket so held before closing it.
  set(_zk_map "send zklock_zk_sys_send\nclose zklock_zk_sys_close\n")
  foreach(_name IN LISTS _zk_names)
    string(APPEND _zk_map "${_name} zklock_zk_${_name}\n")
    if(_name IN_LIST _zk_words)
      string(APPEND _zk_header "#define ${_name} zklock_zk_${_name}\n")
    endif()
  endforeach()
  file(WRITE ${_zk_dir}/symbols.map "${_zk_map}")
  file(WRITE ${_zk_dir}/zklock_zk_names.h "${_zk_header}")
  execute_process(COMMAND ${ZKLOCK_OBJCOPY} --redefine-syms=${_zk_dir}/symbols.map
      ${ZKLOCK_ZOOKEEPER_ST_ARCHIVE} ${ZKLOCK_PRIVATE_CLIENT_ARCHIVE}
    RESULT_VARIABLE _zk_rc ERROR_VARIABLE _zk_err)
  if(NOT _zk_rc EQUAL 0)
    message(FATAL_ERROR "zklock: ${ZKLOCK_OBJCOPY} could not rename the C client's symbols: ${_zk_err}")
  endif()
  # The single-threaded client writes a request to the socket inside the call that makes it
  # (adaptor_send_queue); when that write fails it closes the socket without failing the requests
  # already sent on it, which stay first in line for replies that never come: the next connection's
  # first reply then mismatches them ("unexpected server response", every request failed with
  # ZRUNTIMEINCONSISTENCY). zklock defines the function itself (handle.cpp): the same write, whose
  # failure is left for the loop's next read or write to find, where the client fails everything
  # sent and reconnects. Weakened here so that zklock's definition is the one linked.
  execute_process(COMMAND ${ZKLOCK_OBJCOPY} --weaken-symbol=zklock_zk_adaptor_send_queue
      ${ZKLOCK_PRIVATE_CLIENT_ARCHIVE}
    RESULT_VARIABLE _zk_rc ERROR_VARIABLE _zk_err)
  if(NOT _zk_rc EQUAL 0)
    message(FATAL_ERROR "zklock: ${ZKLOCK_OBJCOPY} could not weaken adaptor_send_queue: ${_zk_err}")
  endif()
  set(ZKLOCK_PRIVATE_CLIENT_SOURCE_SUM "${_zk_sum}" CACHE INTERNAL "")
  message(STATUS "zklock: private single-threaded ZooKeeper C client: ${_zk_count} symbols of "
    "${ZKLOCK_ZOOKEEPER_ST_ARCHIVE} renamed into ${ZKLOCK_PRIVATE_CLIENT_ARCHIVE}")
endif()
# The header that zklock's implementation units include instead of <zookeeper/zookeeper.h>.
file(WRITE ${_zk_dir}/zklock_zk_client.h.tmp
  "// Generated by cmake/zklockPrivateClient.cmake. The C client, as zklock's private copy names it.\n"
  "#pragma once\n#include \"zklock_zk_names.h\"\n#include <zookeeper/zookeeper.h>\n")
file(COPY_FILE ${_zk_dir}/zklock_zk_client.h.tmp ${_zk_dir}/zklock_zk_client.h ONLY_IF_DIFFERENT)

if(NOT TARGET zklock_zookeeper_st)
  add_library(zklock_zookeeper_st STATIC IMPORTED)
  set_target_properties(zklock_zookeeper_st PROPERTIES
    IMPORTED_LOCATION ${ZKLOCK_PRIVATE_CLIENT_ARCHIVE}
    INTERFACE_INCLUDE_DIRECTORIES "${_zk_dir};${ZooKeeper_INCLUDE_DIR}")
  # The capable client's header declares zookeeper_init_ssl and zookeeper_init_sasl only with these
  # defined; ZKLOCK_HAVE_TLS / ZKLOCK_HAVE_SASL tell zklock's implementation units what it can do.
  # ZKLOCK_HAVE_SET_DATA_WATCHES: it has zoo_aset_data_watches (tools/zookeeper-client), one request
  # for a waiter's watches; ZKLOCK_HAVE_MULTI_CONTAINER: its zoo_amulti reads a container's create
  # result (a fresh lock node and our contender in one transaction).
  set(_zk_defs ZKLOCK_HAVE_TLS=$<BOOL:${ZKLOCK_HAVE_TLS}> ZKLOCK_HAVE_SASL=$<BOOL:${ZKLOCK_HAVE_SASL}>
    ZKLOCK_HAVE_SET_DATA_WATCHES=$<BOOL:${ZKLOCK_HAVE_SET_DATA_WATCHES}>
    ZKLOCK_HAVE_MULTI_CONTAINER=$<BOOL:${ZKLOCK_HAVE_MULTI_CONTAINER}>)
  if(ZKLOCK_HAVE_TLS)
    list(APPEND _zk_defs HAVE_OPENSSL_H)
    set_property(TARGET zklock_zookeeper_st APPEND PROPERTY INTERFACE_LINK_LIBRARIES OpenSSL::SSL OpenSSL::Crypto)
  endif()
  if(ZKLOCK_HAVE_SASL)
    list(APPEND _zk_defs HAVE_CYRUS_SASL_H)
    set_property(TARGET zklock_zookeeper_st APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${ZKLOCK_SASL2_LIBRARY})
  endif()
  set_property(TARGET zklock_zookeeper_st PROPERTY INTERFACE_COMPILE_DEFINITIONS ${_zk_defs})
  unset(_zk_defs)
endif()
unset(_zk_dir)
