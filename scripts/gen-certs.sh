#!/usr/bin/env bash
# Generates a small PKI with openssl, for the TLS tests and for trying TLS
# listeners by hand:
#
#   scripts/gen-certs.sh DIR
#
# DIR/ca.crt, ca.key            test CA (CN=nanomq test CA)
# DIR/server.crt, server.key    CN=localhost, SAN DNS:localhost, IP:127.0.0.1,
#                               IP:::1, signed by the CA
# DIR/server-enc.key            the same server key, encrypted (AES-256) with
#                               the password in DIR/server-enc.pass
#                               ("nanomq-test" unless KEY_PASSWORD is set)
# DIR/server-ec.crt, server-ec.key  the same server names on an ECDSA P-256
#                               key, signed by the CA
# DIR/client1.crt, client1.key  client certificate CN=client1, signed by the CA
# DIR/client1-ec.crt, client1-ec.key  client certificate CN=client1-ec on an
#                               ECDSA P-256 key, signed by the CA
# DIR/rogue.crt, rogue.key      self-signed client certificate CN=rogue (not
#                               trusted by the CA)
# DIR/other-ca.crt, other-ca.key  an unrelated CA (a "wrong CA" for clients)
#
# These are test credentials: the CA key is left unprotected in DIR. Use
# your own PKI in production. Environment: DAYS (3650), KEY_PASSWORD.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
dir=$1
days=${DAYS:-3650}
pass=${KEY_PASSWORD:-nanomq-test}
command -v openssl >/dev/null || {
	echo "$0: openssl not found (apt-get install openssl)" >&2
	exit 1
}
mkdir -p "$dir"
cd "$dir"
umask 077

# key FILE: a new 2048-bit RSA key, or an ECDSA P-256 key when ALG=ec.
key() {
	if [ "${ALG:-rsa}" = ec ]; then
		openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
			-pkeyopt ec_param_enc:named_curve -out "$1" 2>/dev/null
	else
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
	fi
}

# ext FILE LINES...: an extension file for `openssl x509 -extfile`.
ext() {
	local f=$1
	shift
	printf '%s\n' "$@" >"$f"
}

# A CA: self-signed, allowed to sign certificates.
ca() {
	local name=$1 cn=$2
	key "$name.key"
	ext "$name.ext" "basicConstraints=critical,CA:TRUE" \
		"keyUsage=critical,keyCertSign,cRLSign" "subjectKeyIdentifier=hash"
	openssl req -new -key "$name.key" -subj "/O=nanomq test/CN=$cn" -out "$name.csr"
	openssl x509 -req -in "$name.csr" -signkey "$name.key" -days "$days" \
		-extfile "$name.ext" -out "$name.crt" 2>/dev/null
	rm -f "$name.csr" "$name.ext"
}

# leaf NAME CN ISSUER EXT...: a certificate for NAME signed by ISSUER (a
# CA name, or "self").
leaf() {
	local name=$1 cn=$2 issuer=$3
	shift 3
	key "$name.key"
	ext "$name.ext" "basicConstraints=critical,CA:FALSE" "$@"
	openssl req -new -key "$name.key" -subj "/O=nanomq test/CN=$cn" -out "$name.csr"
	if [ "$issuer" = self ]; then
		openssl x509 -req -in "$name.csr" -signkey "$name.key" -days "$days" \
			-extfile "$name.ext" -out "$name.crt" 2>/dev/null
	else
		openssl x509 -req -in "$name.csr" -CA "$issuer.crt" -CAkey "$issuer.key" \
			-CAcreateserial -days "$days" -extfile "$name.ext" -out "$name.crt" 2>/dev/null
	fi
	rm -f "$name.csr" "$name.ext"
}

ca ca "nanomq test CA"
ca other-ca "unrelated test CA"
leaf server localhost ca "keyUsage=critical,digitalSignature,keyEncipherment" \
	"extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client1 client1 ca "keyUsage=critical,digitalSignature,keyEncipherment" \
	"extendedKeyUsage=clientAuth"
ALG=ec leaf server-ec localhost ca "keyUsage=critical,digitalSignature" \
	"extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
ALG=ec leaf client1-ec client1-ec ca "keyUsage=critical,digitalSignature" \
	"extendedKeyUsage=clientAuth"
leaf rogue rogue self "keyUsage=critical,digitalSignature,keyEncipherment" \
	"extendedKeyUsage=clientAuth"
# Traditional PEM encryption (AES-256-CBC): mbed TLS 2.28, which the broker
# uses, cannot open PKCS#8 keys encrypted with AES (OpenSSL's default).
openssl rsa -in server.key -aes256 -traditional -passout "pass:$pass" \
	-out server-enc.key 2>/dev/null
printf '%s\n' "$pass" >server-enc.pass
rm -f ./*.srl
chmod 644 ./*.crt
openssl verify -CAfile ca.crt server.crt client1.crt server-ec.crt client1-ec.crt >/dev/null
echo "certificates written to $dir"
