# Finds every dependency and, when one is missing, stops with the name of the
# Debian package that provides it.
find_package(Threads REQUIRED)

macro(nmq_require what pkg)
  if(NOT ${what})
    message(FATAL_ERROR "Missing dependency: install the Debian package '${pkg}' (apt-get install ${pkg})")
  endif()
endmacro()

find_package(nng 1.5.2 CONFIG QUIET)
if(nng_FOUND)
  set(NMQ_HAVE_NNG TRUE)
endif()
nmq_require(NMQ_HAVE_NNG libnng-dev)

find_package(cJSON CONFIG QUIET)
if(cJSON_FOUND)
  set(NMQ_HAVE_CJSON TRUE)
endif()
nmq_require(NMQ_HAVE_CJSON libcjson-dev)

find_library(MBEDTLS_LIB mbedtls)
find_library(MBEDX509_LIB mbedx509)
find_library(MBEDCRYPTO_LIB mbedcrypto)
nmq_require(MBEDTLS_LIB libmbedtls-dev)
nmq_require(MBEDX509_LIB libmbedtls-dev)
nmq_require(MBEDCRYPTO_LIB libmbedtls-dev)

# STATIC_DEPS (option in the top-level CMakeLists.txt): link NNG and
# mbed TLS from the static archives that Debian's libnng-dev and
# libmbedtls-dev ship instead of their shared libraries. glibc and cJSON
# (Debian has no libcjson.a) stay shared.
#
# Everything links NNG through nmq_nng and mbed TLS through the variables
# MBEDTLS_LIB, MBEDX509_LIB and MBEDCRYPTO_LIB. With STATIC_DEPS these
# variables are set (as normal variables, which hide the cache entries of
# the same name) to imported targets of the archives, so that every user
# gets the same copy.
add_library(nmq_nng INTERFACE)
if(STATIC_DEPS)
  find_library(NNG_STATIC_LIB libnng.a)
  find_library(MBEDTLS_STATIC_LIB libmbedtls.a)
  find_library(MBEDX509_STATIC_LIB libmbedx509.a)
  find_library(MBEDCRYPTO_STATIC_LIB libmbedcrypto.a)
  nmq_require(NNG_STATIC_LIB "libnng-dev (or configure with -DSTATIC_DEPS=OFF)")
  nmq_require(MBEDTLS_STATIC_LIB "libmbedtls-dev (or configure with -DSTATIC_DEPS=OFF)")
  nmq_require(MBEDX509_STATIC_LIB "libmbedtls-dev (or configure with -DSTATIC_DEPS=OFF)")
  nmq_require(MBEDCRYPTO_STATIC_LIB "libmbedtls-dev (or configure with -DSTATIC_DEPS=OFF)")
  add_library(nmq_static_mbedcrypto STATIC IMPORTED)
  set_target_properties(nmq_static_mbedcrypto PROPERTIES IMPORTED_LOCATION ${MBEDCRYPTO_STATIC_LIB})
  add_library(nmq_static_mbedx509 STATIC IMPORTED)
  set_target_properties(nmq_static_mbedx509 PROPERTIES IMPORTED_LOCATION ${MBEDX509_STATIC_LIB}
    INTERFACE_LINK_LIBRARIES nmq_static_mbedcrypto)
  add_library(nmq_static_mbedtls STATIC IMPORTED)
  set_target_properties(nmq_static_mbedtls PROPERTIES IMPORTED_LOCATION ${MBEDTLS_STATIC_LIB}
    INTERFACE_LINK_LIBRARIES "nmq_static_mbedx509;nmq_static_mbedcrypto")
  # libnng.a carries NNG's own mbed TLS engine.
  add_library(nmq_static_nng STATIC IMPORTED)
  set_target_properties(nmq_static_nng PROPERTIES IMPORTED_LOCATION ${NNG_STATIC_LIB}
    INTERFACE_LINK_LIBRARIES "nmq_static_mbedtls;Threads::Threads")
  target_link_libraries(nmq_nng INTERFACE nmq_static_nng)
  target_include_directories(nmq_nng INTERFACE
    $<TARGET_PROPERTY:nng::nng,INTERFACE_INCLUDE_DIRECTORIES>)
  set(MBEDTLS_LIB nmq_static_mbedtls)
  set(MBEDX509_LIB nmq_static_mbedx509)
  set(MBEDCRYPTO_LIB nmq_static_mbedcrypto)
else()
  target_link_libraries(nmq_nng INTERFACE nng::nng)
endif()

if(ENABLE_SQLITE)
  find_package(SQLite3 QUIET)
  nmq_require(SQLite3_FOUND libsqlite3-dev)
endif()

if(BUILD_TESTS)
  find_package(cmocka CONFIG QUIET)
  if(cmocka_FOUND OR CMOCKA_LIBRARIES)
    set(NMQ_HAVE_CMOCKA TRUE)
  endif()
  nmq_require(NMQ_HAVE_CMOCKA libcmocka-dev)
endif()
