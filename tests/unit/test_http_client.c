// Unit tests of the HTTP client's URL parsing (src/http/http_client.c):
// accepted http:// and https:// URLs with their host, port, path and
// query, IPv6 literals, and every reject with the key named in the error;
// then the lookup of a numeric host.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "src/http/http_client.h"

static void expect_url(const char *url, bool https, const char *hostport, const char *host,
    const char *port, const char *path)
{
	http_url u;
	char     err[300] = "";
	nmq_err  e        = http_url_parse(url, "t.url", &u, err, sizeof(err));
	if (e != NMQ_OK) {
		fail_msg("%s: rejected (%s)", url, err);
	}
	assert_int_equal(u.https, https);
	assert_string_equal(u.hostport, hostport);
	assert_string_equal(u.host, host);
	assert_string_equal(u.port, port);
	assert_string_equal(u.path, path);
	http_url_fini(&u);
	assert_null(u.path);
}

static void expect_reject(const char *url, const char *want)
{
	http_url u;
	char     err[300] = "";
	if (http_url_parse(url, "t.url", &u, err, sizeof(err)) != NMQ_EINVAL) {
		fail_msg("%s: accepted (host %s path %s)", url, u.host, u.path);
	}
	assert_null(u.path);
	if (strstr(err, want) == NULL || strncmp(err, "t.url: ", 7) != 0) {
		fail_msg("%s: error \"%s\" lacks \"t.url: ...%s\"", url, err, want);
	}
}

static void test_accepted(void **state)
{
	(void)state;
	expect_url("http://example.com", false, "example.com", "example.com", "80", "/");
	expect_url("http://example.com/", false, "example.com", "example.com", "80", "/");
	expect_url("https://example.com/hook", true, "example.com", "example.com", "443", "/hook");
	expect_url("http://127.0.0.1:8080/a/b?x=1&y=2", false, "127.0.0.1:8080", "127.0.0.1",
	    "8080", "/a/b?x=1&y=2");
	expect_url("https://h:9443/?q", true, "h:9443", "h", "9443", "/?q");
	expect_url("http://[::1]/p", false, "[::1]", "::1", "80", "/p");
	expect_url("https://[fe80::1]:8443/p", true, "[fe80::1]:8443", "fe80::1", "8443", "/p");
	// The longest host that fits.
	char url[300], host[256];
	memset(host, 'a', 255);
	host[255] = '\0';
	snprintf(url, sizeof(url), "http://%s/x", host);
	expect_url(url, false, host, host, "80", "/x");
}

static void test_rejected(void **state)
{
	(void)state;
	expect_reject("ftp://example.com/", "not an http:// or https:// URL");
	expect_reject("example.com/hook", "not an http:// or https:// URL");
	expect_reject("HTTP:/example.com", "not an http:// or https:// URL");
	expect_reject("http://", "bad host");
	expect_reject("https:///path", "bad host");
	expect_reject("http://[::1/p", "bad host");
	char url[300], host[257];
	memset(host, 'a', 256);
	host[256] = '\0';
	snprintf(url, sizeof(url), "http://%s/x", host);
	expect_reject(url, "bad host");
}

static void test_resolve(void **state)
{
	(void)state;
	http_url u;
	char     err[300] = "";
	assert_int_equal(
	    http_url_parse("http://127.0.0.1:8081/a", "t.url", &u, err, sizeof(err)), NMQ_OK);
	assert_int_equal(http_url_resolve(&u, "t.url", err, sizeof(err)), NMQ_OK);
	assert_int_equal(u.addr.ss_family, AF_INET);
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&u.addr;
	assert_int_equal(ntohs(sin->sin_port), 8081);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), 0x7f000001);
	http_url_fini(&u);
	// A port that is not a number does not resolve.
	assert_int_equal(
	    http_url_parse("http://127.0.0.1:http8/a", "t.url", &u, err, sizeof(err)), NMQ_OK);
	assert_int_equal(http_url_resolve(&u, "t.url", err, sizeof(err)), NMQ_EINVAL);
	assert_non_null(strstr(err, "t.url: cannot resolve \"127.0.0.1\" port http8"));
	http_url_fini(&u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_rejected),
		cmocka_unit_test(test_resolve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
