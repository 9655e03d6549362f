#!/usr/bin/env bash
# Installs the Debian packages that the build (and, with "test", the test
# suite) needs, when any is missing. Sourced by run.sh and test.sh.
nmq_install_deps() {
	local pkgs=(build-essential cmake pkg-config libnng-dev libmbedtls-dev libcjson-dev
		libsqlite3-dev)
	if [ "${1:-}" = test ]; then
		pkgs+=(libcmocka-dev mosquitto mosquitto-clients libmosquitto-dev
			python3-paho-mqtt python3-websockets python3-prometheus-client curl clang libclang-rt-14-dev
			clang-format openssl sqlite3)
	fi
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "installing: ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}
