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

if(BUILD_TESTS)
  find_package(cmocka CONFIG QUIET)
  if(cmocka_FOUND OR CMOCKA_LIBRARIES)
    set(NMQ_HAVE_CMOCKA TRUE)
  endif()
  nmq_require(NMQ_HAVE_CMOCKA libcmocka-dev)
endif()
