# SPDX-License-Identifier: Apache-2.0
# zklockImport: what a project that writes `import zklock;` needs, checked while it configures (one
# clear message each), and the language mode of zklock's BMIs, taken from the targets that import it.
# Used by zklock's CMakeLists.txt (top level or subproject) and by the installed zklockConfig.cmake.
include_guard(GLOBAL)
cmake_policy(PUSH)
cmake_policy(VERSION 3.28...3.31)  # functions keep the policies they were defined under

# Stop configuring with one message: the arguments, joined (each as given: ';' stays). The leading
# space keeps CMake from re-wrapping it.
function(_zklock_refuse)
  set(text "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE ${last})
    string(APPEND text "${ARGV${i}}")
  endforeach()
  message(FATAL_ERROR " zklock: ${text}")
endfunction()

# zklock_cxx_stdlib(<out>): the C++ standard library that CMAKE_CXX_COMPILER with CMAKE_CXX_FLAGS
# uses: libstdc++, libc++, msvc-stl or unknown. One try_compile, remembered per compiler and flags.
function(zklock_cxx_stdlib out)
  set(key "${CMAKE_CXX_COMPILER} ${CMAKE_CXX_FLAGS}")
  if(NOT "${_ZKLOCK_CXX_STDLIB_KEY}" STREQUAL key)
    # The compile fails on purpose: the #error line names the library.
    try_compile(ignored SOURCE_FROM_CONTENT zklock_stdlib.cpp [[
#if __has_include(<version>)
#  include <version>
#endif
#if defined(_LIBCPP_VERSION)
#  error zklock-stdlib=libc++
#elif defined(__GLIBCXX__)
#  error zklock-stdlib=libstdc++
#elif defined(_MSVC_STL_VERSION)
#  error zklock-stdlib=msvc-stl
#else
#  error zklock-stdlib=unknown
#endif
]] NO_CACHE OUTPUT_VARIABLE log)
    set(lib unknown)
    if(log MATCHES "zklock-stdlib=([a-z+-]+)")
      set(lib "${CMAKE_MATCH_1}")
    endif()
    set(_ZKLOCK_CXX_STDLIB "${lib}" CACHE INTERNAL "zklock_cxx_stdlib() for _ZKLOCK_CXX_STDLIB_KEY")
    set(_ZKLOCK_CXX_STDLIB_KEY "${key}" CACHE INTERNAL "")
  endif()
  set(${out} "${_ZKLOCK_CXX_STDLIB}" PARENT_SCOPE)
endfunction()

# zklock_check_toolchain(CMP0155 <the importing project's setting> [STDLIB <zklock's library>])
# CMake builds modules only with a compiler that reports imports, and only with Ninja or Visual Studio;
# it scans a project's own sources for `import` only under policy CMP0155 (cmake_minimum_required
# 3.28 or later); a prebuilt zklock links only with code built against the same standard library.
function(zklock_check_toolchain)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CMP0155;STDLIB" "")
  if(NOT CMAKE_CXX_COMPILER_LOADED)
    _zklock_refuse("enable C++ before using zklock: project(... LANGUAGES CXX)")
  endif()
  set(id "${CMAKE_CXX_COMPILER_ID}")
  set(version "${CMAKE_CXX_COMPILER_VERSION}")
  if(NOT CMAKE_CXX_SCANDEP_SOURCE OR NOT (id STREQUAL "MSVC"
       OR (id STREQUAL "Clang" AND version VERSION_GREATER_EQUAL 17)
       OR (id STREQUAL "GNU" AND version VERSION_GREATER_EQUAL 14)))
    set(scanner "")
    if(NOT CMAKE_CXX_SCANDEP_SOURCE)
      set(scanner " (CMake finds no module scanner for it)")
    endif()
    # (the text up to "found" is what tests/CMakeLists.txt's compiler gates look for)
    message(FATAL_ERROR " zklock needs C++20 modules: clang++ >= 17 with clang-scan-deps "
      "(e.g. -DCMAKE_CXX_COMPILER=clang++-19) or g++ >= 14; found ${id} ${version}${scanner}")
  endif()
  if(NOT CMAKE_GENERATOR MATCHES "^Ninja|^Visual Studio 1[7-9]")
    _zklock_refuse("C++20 modules build only with the Ninja generators (Ninja >= 1.11) or Visual "
      "Studio 2022, not with \"${CMAKE_GENERATOR}\": configure with -G Ninja")
  endif()
  if(NOT arg_CMP0155 STREQUAL "NEW" AND NOT CMAKE_CXX_SCAN_FOR_MODULES)
    _zklock_refuse("CMake scans your sources for `import zklock;` only under policy CMP0155, which "
      "this project leaves unset: write cmake_minimum_required(VERSION 3.28) or later (or set "
      "CMAKE_CXX_SCAN_FOR_MODULES ON)")
  endif()
  if(arg_STDLIB)
    zklock_cxx_stdlib(stdlib)
    if(NOT stdlib STREQUAL arg_STDLIB)
      _zklock_refuse("this zklock was built against ${arg_STDLIB}, but this project's compiler "
        "(${CMAKE_CXX_COMPILER} ${CMAKE_CXX_FLAGS}) uses ${stdlib}: use ${arg_STDLIB} "
        "(no -stdlib=libc++), or build and install zklock with this compiler and flags")
    endif()
  endif()
endfunction()

# All buildsystem targets of this project, every directory.
function(_zklock_all_targets out)
  set(dirs "${CMAKE_SOURCE_DIR}")
  set(all "")
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    list(APPEND all ${targets})
    list(APPEND dirs ${subdirs})
  endwhile()
  set(${out} "${all}" PARENT_SCOPE)
endfunction()

# _zklock_append(<list> <target> <property>): appends the property's value, if it is set.
function(_zklock_append list target property)
  get_target_property(value "${target}" ${property})
  if(NOT value MATCHES "-NOTFOUND$")
    list(APPEND ${list} ${value})
    set(${list} "${${list}}" PARENT_SCOPE)
  endif()
endfunction()

# _zklock_usage(<target> <zklock> <out-imports> <out-standard>): does <target> get <zklock>'s
# modules: DIRECT (it links <zklock>), INDIRECT (through the interface of a target it links, not
# through $<LINK_ONLY:>) or FALSE? And the least standard its compile features and theirs ask for.
function(_zklock_usage target zklock out_imports out_standard)
  set(todo "")
  set(features "")
  _zklock_append(todo ${target} LINK_LIBRARIES)
  _zklock_append(features ${target} COMPILE_FEATURES)
  list(LENGTH todo direct)  # the first ones popped are the target's own
  set(seen "")
  set(imports FALSE)
  while(NOT todo STREQUAL "")
    list(POP_FRONT todo item)
    math(EXPR direct "${direct} - 1")
    if(item MATCHES "^\\$<BUILD_INTERFACE:([^$<>]+)>$")
      set(item "${CMAKE_MATCH_1}")
    endif()
    # Other generator expressions, plain library names and CMake's ::@ markers are no targets here.
    if(item IN_LIST seen OR NOT TARGET "${item}")
      continue()
    endif()
    list(APPEND seen "${item}")
    get_target_property(aliased "${item}" ALIASED_TARGET)
    if(aliased)
      set(item "${aliased}")
    endif()
    if(item STREQUAL zklock AND direct GREATER_EQUAL 0)
      set(imports DIRECT)
    elseif(item STREQUAL zklock AND NOT imports)
      set(imports INDIRECT)
    endif()
    _zklock_append(features "${item}" INTERFACE_COMPILE_FEATURES)
    _zklock_append(todo "${item}" INTERFACE_LINK_LIBRARIES)
  endwhile()
  set(standard 0)
  foreach(feature IN LISTS features)
    if(feature MATCHES "^cxx_std_([0-9]+)$" AND NOT CMAKE_MATCH_1 EQUAL 98
       AND CMAKE_MATCH_1 GREATER standard)
      set(standard ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out_imports} ${imports} PARENT_SCOPE)
  set(${out_standard} ${standard} PARENT_SCOPE)
endfunction()

# Deferred to the end of the top-level directory by zklock_follow_importers(): see there.
function(_zklock_follow zklock stdlib standard_default extensions_default)
  if(NOT standard_default)
    set(standard_default 17)
  endif()
  get_target_property(zklock_imported ${zklock} IMPORTED)
  _zklock_all_targets(targets)
  set(modes "")  # one "<mode> <target>" per importer
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(scan ${target} CXX_SCAN_FOR_MODULES)
    if(target STREQUAL zklock OR NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       OR (NOT scan AND NOT scan MATCHES "-NOTFOUND$"))  # scanning switched off: it cannot import
      continue()
    endif()
    _zklock_usage(${target} ${zklock} imports floor)
    if(NOT imports)
      continue()
    elseif(imports STREQUAL "INDIRECT" AND zklock_imported)
      # CMake (3.31) compiles an installed module interface only for the targets that link it
      # themselves, not for those that get it through another target's interface (a subproject's
      # library reaches them all): link it here too, as that interface says.
      target_link_libraries(${target} PRIVATE ${zklock})
    endif()
    # The mode CMake gives it: CXX_STANDARD (else the compiler's default) raised to what its compile
    # features ask for (zklock's cxx_std_20 at least); CXX_EXTENSIONS, else the compiler's default.
    get_target_property(standard ${target} CXX_STANDARD)
    if(NOT standard OR standard EQUAL 98)
      set(standard ${standard_default})
    endif()
    if(floor GREATER standard)
      set(standard ${floor})
    endif()
    get_target_property(extensions ${target} CXX_EXTENSIONS)
    if(extensions MATCHES "-NOTFOUND$")
      set(extensions ${extensions_default})
    endif()
    set(mode c++${standard})
    if(extensions)
      set(mode gnu++${standard})
    endif()
    # Flags that CMake does not know about would make this target differ from the BMIs.
    get_target_property(options ${target} COMPILE_OPTIONS)
    if(options MATCHES "(^|;)(-std=[^;]*)")
      _zklock_refuse("target ${target} sets its language mode with ${CMAKE_MATCH_2} in its compile "
        "options, which CMake does not apply to zklock's module interface: remove it and set "
        "CXX_STANDARD (20 or later) and CXX_EXTENSIONS (or CMAKE_CXX_STANDARD, CMAKE_CXX_EXTENSIONS)")
    endif()
    if(stdlib AND options MATCHES "(^|;)-stdlib=([^;]*)" AND NOT CMAKE_MATCH_2 STREQUAL stdlib)
      _zklock_refuse("target ${target} compiles with -stdlib=${CMAKE_MATCH_2}, but zklock uses "
        "${stdlib}: one program links one C++ standard library")
    endif()
    list(APPEND modes "${mode} ${target}")
  endforeach()
  if(NOT modes)
    return()
  endif()
  # One mode for every importer: CMake builds zklock's BMIs once per build.
  set(distinct "")
  foreach(entry IN LISTS modes)
    string(REPLACE " " ";" entry "${entry}")
    list(GET entry 0 mode)
    list(APPEND distinct ${mode})
  endforeach()
  list(REMOVE_DUPLICATES distinct)
  list(LENGTH distinct count)
  if(count GREATER 1)
    list(JOIN modes ", " listing)
    _zklock_refuse("the targets that import zklock use ${count} language modes (${listing}), but "
      "CMake builds zklock's module interface once per build, in one mode: give them all one "
      "CXX_STANDARD and CXX_EXTENSIONS (e.g. set CMAKE_CXX_STANDARD and CMAKE_CXX_EXTENSIONS before "
      "creating them)")
  endif()
  string(REGEX MATCH "^(c|gnu)\\+\\+([0-9]+)$" ignored "${distinct}")
  set(standard ${CMAKE_MATCH_2})
  set(extensions OFF)
  if(CMAKE_MATCH_1 STREQUAL "gnu")
    set(extensions ON)
  endif()
  if(zklock_imported)
    # CMake compiles an imported module interface in a target of its own (zklock__zklock@synth_...)
    # whose language settings come from these properties of the imported target.
    get_target_property(features ${zklock} IMPORTED_CXX_MODULES_COMPILE_FEATURES)
    list(FILTER features EXCLUDE REGEX "^cxx_std_|-NOTFOUND$")
    set_target_properties(${zklock} PROPERTIES
      IMPORTED_CXX_MODULES_COMPILE_FEATURES "${features};cxx_std_${standard}"
      CXX_EXTENSIONS ${extensions})
  else()
    set_target_properties(${zklock} PROPERTIES CXX_STANDARD ${standard} CXX_EXTENSIONS ${extensions})
  endif()
  message(STATUS "zklock: module interface compiled as ${distinct}, like the targets that import it")
endfunction()

# zklock_follow_importers(<zklock target> [STDLIB <its standard library>])
# An importer must be compiled in the language mode (standard, extensions) of the BMIs it imports,
# and CMake (3.28 to 3.31 at least) builds zklock's BMIs once per build. So at the end of the
# top-level directory, when every target exists, the targets that import zklock are found and must
# agree on one mode, which becomes the BMIs' mode: CXX_STANDARD and CXX_EXTENSIONS of the library
# built here, or the imported target's properties for an installed zklock. Disagreeing targets,
# -std= in compile options, or another -stdlib= stop the configure step with one message.
function(zklock_follow_importers zklock)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "STDLIB" "")
  get_property(registered GLOBAL PROPERTY _ZKLOCK_FOLLOWS_${zklock})
  if(registered)
    return()
  endif()
  set_property(GLOBAL PROPERTY _ZKLOCK_FOLLOWS_${zklock} TRUE)
  # The compiler's defaults as seen here: the top-level directory might not have enabled C++.
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]] CALL _zklock_follow
    [[${zklock}]] [[${arg_STDLIB}]] [[${CMAKE_CXX_STANDARD_DEFAULT}]] [[${CMAKE_CXX_EXTENSIONS_DEFAULT}]])")
endfunction()

cmake_policy(POP)
