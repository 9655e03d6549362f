// Unit tests of src/auth/acl.c and acl_cache.c: subjects, actions, topics,
// the covers relation, placeholders, literals, $share, rule order,
// no_match, build errors, NanoMQ-style rule files, the decision cache, and
// the delivery side: read access to a topic name, filter overlap, and the
// SUBSCRIBE-time "could this filter be denied" analysis.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/mqtt_codec.h"
#include "src/auth/acl.h"
#include "src/auth/acl_cache.h"
#include "src/conf/conf.h"
#include "src/topic/topic_tree.h"

// Builds an acl from JSON text; fails the test on error.
static acl *mk(const char *json, int no_match)
{
	char   err[256];
	cJSON *t = cJSON_Parse(json);
	acl   *a;

	if (t == NULL) {
		fail_msg("bad JSON in test: %s", json);
	}
	a = acl_alloc(t, no_match, err, sizeof(err));
	cJSON_Delete(t);
	if (a == NULL) {
		fail_msg("%s", err);
	}
	return a;
}

static int pub(const acl *a, const acl_client *who, const char *topic)
{
	return acl_check(a, who, ACL_PUBLISH, topic, strlen(topic));
}

static int sub(const acl *a, const acl_client *who, const char *filter)
{
	return acl_check(a, who, ACL_SUBSCRIBE, filter, strlen(filter));
}

static bool covers(const char *r, const char *q)
{
	return acl_filter_covers(r, strlen(r), q, strlen(q));
}

static void test_covers_table(void **state)
{
	(void)state;
	static const struct {
		const char *rule;
		const char *req;
		bool        want;
	} t[] = {
		{ "a/b", "a/b", true },
		{ "a/b", "a/c", false },
		{ "a/b", "a/b/c", false },
		{ "a/b/c", "a/b", false },
		{ "a/b", "a/+", false },
		{ "a/b", "a/#", false },
		{ "a/+", "a/b", true },
		{ "a/+", "a/+", true },
		{ "a/+", "a/#", false },
		{ "a/+", "a", false },
		{ "a/+", "a/b/c", false },
		{ "a/+", "+/b", false },
		{ "a/#", "a", true },
		{ "a/#", "a/b", true },
		{ "a/#", "a/+", true },
		{ "a/#", "a/#", true },
		{ "a/#", "a/+/b", true },
		{ "a/#", "a/b/#", true },
		{ "a/#", "a/+/+/#", true },
		{ "a/#", "b/#", false },
		{ "a/#", "+/b", false },
		{ "a/#", "#", false },
		{ "a/#", "ab", false },
		{ "a/+/#", "a/#", false },
		{ "a/+/#", "a/b", true },
		{ "a/+/#", "a/+", true },
		{ "a/+/#", "a/b/#", true },
		{ "a/+/#", "a", false },
		{ "a/+/c", "a/+/c", true },
		{ "a/+/c", "a/b/c", true },
		{ "a/+/c", "a/+/+", false },
		{ "+/+", "a/b", true },
		{ "+/+", "+/b", true },
		{ "+/+", "+/+", true },
		{ "+/+", "a/#", false },
		{ "+/b", "+/+", false },
		{ "+", "a", true },
		{ "+", "+", true },
		{ "+", "#", false },
		{ "+", "a/b", false },
		{ "#", "a", true },
		{ "#", "a/b/c", true },
		{ "#", "+", true },
		{ "#", "+/#", true },
		{ "#", "#", true },
		{ "+/#", "#", true },
		{ "+/#", "a", true },
		{ "+/+/#", "#", false },
		{ "#", "/", true },
		{ "+/+", "/", true },
		{ "/", "/", true },
		{ "/+", "/a", true },
		{ "/+", "a/", false },
		{ "+/", "a/", true },
		{ "a//b", "a/+/b", false },
		{ "a/+/b", "a//b", true },
		// '$' topics: a rule starting with a wildcard does not cover them.
		{ "#", "$SYS/#", false },
		{ "#", "$SYS/a", false },
		{ "+/#", "$SYS/#", false },
		{ "+", "$SYS", false },
		{ "+/a", "$x/a", false },
		{ "$SYS/#", "$SYS/#", true },
		{ "$SYS/#", "$SYS/brokers/+/clients", true },
		{ "$SYS/#", "$SYS", true },
		{ "$SYS/+", "$SYS/#", false },
		{ "a/+", "a/$b", true },
		{ "#", "a/$b", true },
		{ "$SYS/#", "#", false },
		{ "$SYS/#", "+/#", false },
		// Invalid filters on either side.
		{ "", "a", false },
		{ "a", "", false },
		{ "a/#/b", "a/b", false },
		{ "a+", "a+", false },
		{ "a/b#", "a/b#", false },
		{ "a", "a/#/b", false },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (covers(t[i].rule, t[i].req) != t[i].want) {
			fail_msg("covers(\"%s\", \"%s\") should be %s", t[i].rule, t[i].req,
			    t[i].want ? "true" : "false");
		}
	}
	// Lengths are honoured, and a NUL byte makes a filter invalid.
	assert_true(acl_filter_covers("a/#xyz", 3, "a/bc", 3));
	assert_false(acl_filter_covers("a/+", 3, "a/\0", 3));
}

// Appends to out every string of 1..max levels over the given level set.
static size_t gen(char out[][16], size_t cap, const char *const *lv, size_t nlv, int max)
{
	size_t n     = 0;
	size_t start = 0;

	for (size_t i = 0; i < nlv && n < cap; i++) {
		snprintf(out[n++], 16, "%s", lv[i]);
	}
	for (int depth = 2; depth <= max; depth++) {
		size_t end = n;
		for (size_t p = start; p < end; p++) {
			for (size_t i = 0; i < nlv && n < cap; i++) {
				size_t pl = strlen(out[p]);
				size_t ll = strlen(lv[i]);
				if (pl + 1 + ll < 16) {
					// memcpy, not snprintf: gcc cannot see that the
					// lengths were checked (-Wformat-truncation).
					memcpy(out[n], out[p], pl);
					out[n][pl] = '/';
					memcpy(out[n] + pl + 1, lv[i], ll + 1);
					n++;
				}
			}
		}
		start = end;
	}
	return n;
}

// covers(R, F) holds exactly when every topic F matches is matched by R,
// checked over every small filter pair against every small topic.
static void test_covers_exact(void **state)
{
	(void)state;
	static const char *const flv[] = { "a", "b", "$x", "", "+", "#" };
	static const char *const tlv[] = { "a", "b", "$x", "", "c" };
	static char              f[2000][16];
	static char              tp[2000][16];
	size_t                   nf     = gen(f, 2000, flv, 6, 3);
	size_t                   nt     = gen(tp, 2000, tlv, 5, 4);
	size_t                   nvalid = 0;

	for (size_t i = 0; i < nf; i++) {
		if (!mqtt_topic_filter_valid((const uint8_t *)f[i], strlen(f[i]))) {
			continue;
		}
		nvalid++;
		for (size_t j = 0; j < nf; j++) {
			if (!mqtt_topic_filter_valid((const uint8_t *)f[j], strlen(f[j]))) {
				continue;
			}
			bool        cov     = covers(f[i], f[j]);
			const char *witness = NULL;
			for (size_t k = 0; k < nt && witness == NULL; k++) {
				size_t tl = strlen(tp[k]);
				if (topic_filter_match(f[j], strlen(f[j]), tp[k], tl)
				    && !topic_filter_match(f[i], strlen(f[i]), tp[k], tl)) {
					witness = tp[k];
				}
			}
			if (cov && witness != NULL) {
				fail_msg("covers(\"%s\", \"%s\") but \"%s\" escapes", f[i], f[j],
				    witness);
			}
			if (!cov && witness == NULL) {
				fail_msg("covers(\"%s\", \"%s\") is false, no topic escapes", f[i],
				    f[j]);
			}
		}
	}
	assert_true(nvalid > 150);
}

static void test_subjects(void **state)
{
	(void)state;
	acl *a
	    = mk("[{\"permit\": \"allow\", \"username\": \"alice\"},"
	         " {\"permit\": \"allow\", \"clientid\": \"dev-7\"},"
	         " {\"permit\": \"allow\", \"ipaddr\": \"192.168.1.10\"},"
	         " {\"permit\": \"allow\", \"ipaddrs\": [\"10.0.0.0/8\", \"172.16.0.0/12\"]},"
	         " {\"permit\": \"allow\", \"ipaddrs\": [\"2001:db8::/32\", \"::1\"]},"
	         " {\"permit\": \"allow\", \"ipaddr\": \"100.64.0.0/10\", \"username\": \"bob\"}]",
	        ACL_DENY);
	acl_client c = { "x", NULL, NULL };

	assert_int_equal(pub(a, &c, "t"), ACL_DENY);
	c.username = "alice";
	assert_int_equal(pub(a, &c, "t"), ACL_ALLOW);
	c.username = "Alice";
	assert_int_equal(pub(a, &c, "t"), ACL_DENY);
	c.username = "alice2";
	assert_int_equal(pub(a, &c, "t"), ACL_DENY);
	c.username = NULL;
	c.clientid = "dev-7";
	assert_int_equal(pub(a, &c, "t"), ACL_ALLOW);
	c.clientid = "dev-70";
	assert_int_equal(pub(a, &c, "t"), ACL_DENY);

	static const struct {
		const char *peer;
		int         want;
	} peers[] = {
		{ "192.168.1.10", ACL_ALLOW },
		{ "192.168.1.10:51234", ACL_ALLOW },
		{ "192.168.1.11:51234", ACL_DENY },
		{ "192.168.1.1:51234", ACL_DENY },
		{ "[::ffff:192.168.1.10]:1883", ACL_ALLOW },
		{ "::ffff:192.168.1.10", ACL_ALLOW },
		{ "10.0.0.1:1", ACL_ALLOW },
		{ "10.255.255.255:1", ACL_ALLOW },
		{ "11.0.0.0:1", ACL_DENY },
		{ "9.255.255.255:1", ACL_DENY },
		{ "172.16.0.1:1", ACL_ALLOW },
		{ "172.31.255.255:1", ACL_ALLOW },
		{ "172.32.0.0:1", ACL_DENY },
		{ "172.15.255.255:1", ACL_DENY },
		{ "[2001:db8::5]:1883", ACL_ALLOW },
		{ "[2001:db8:ffff:ffff::1]:1883", ACL_ALLOW },
		{ "[2001:db9::1]:1883", ACL_DENY },
		{ "2001:db8::5", ACL_ALLOW },
		{ "[::1]:1883", ACL_ALLOW },
		{ "::1", ACL_ALLOW },
		{ "[::2]:1883", ACL_DENY },
		{ "[fe80::1%eth0]:1883", ACL_DENY },
		{ "100.64.0.1:1", ACL_DENY }, // needs username bob too
		{ "unknown", ACL_DENY },
		{ "", ACL_DENY },
		{ "[::1", ACL_DENY },
		{ "1.2.3.4.5", ACL_DENY },
		{ "10.0.0.1:1:2", ACL_DENY },
		{ "[10.0.0.1]:1", ACL_ALLOW },
		{ "0123456789012345678901234567890123456789012345678901234567890123456789",
		    ACL_DENY },
	};
	c.clientid = "x";
	for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
		c.peer = peers[i].peer;
		if (pub(a, &c, "t") != peers[i].want) {
			fail_msg("peer \"%s\": expected %d", peers[i].peer, peers[i].want);
		}
	}
	c.peer     = "100.64.0.1:1";
	c.username = "bob";
	assert_int_equal(pub(a, &c, "t"), ACL_ALLOW);
	c.peer = "100.128.0.1:1";
	assert_int_equal(pub(a, &c, "t"), ACL_DENY);
	acl_free(a);

	// "#" matches every client, with or without a user name.
	a = mk("[{\"permit\": \"deny\", \"username\": \"#\", \"topics\": [\"u\"]},"
	       " {\"permit\": \"deny\", \"clientid\": \"#\", \"topics\": [\"c\"]}]",
	    ACL_ALLOW);
	c = (acl_client) { "any", NULL, NULL };
	assert_int_equal(pub(a, &c, "u"), ACL_DENY);
	assert_int_equal(pub(a, &c, "c"), ACL_DENY);
	assert_int_equal(pub(a, &c, "x"), ACL_ALLOW);
	c.username = "someone";
	assert_int_equal(pub(a, &c, "u"), ACL_DENY);
	acl_free(a);

	// Prefix lengths that do not fall on a byte, /0 and /32.
	a = mk("[{\"permit\": \"allow\", \"ipaddr\": \"192.168.2.0/23\", \"topics\": [\"a\"]},"
	       " {\"permit\": \"allow\", \"ipaddr\": \"0.0.0.0/0\", \"topics\": [\"b\"]},"
	       " {\"permit\": \"allow\", \"ipaddr\": \"8.8.8.8/32\", \"topics\": [\"c\"]},"
	       " {\"permit\": \"allow\", \"ipaddr\": \"fd00::/7\", \"topics\": [\"d\"]},"
	       " {\"permit\": \"allow\", \"ipaddrs\": [], \"topics\": [\"e\"]}]",
	    ACL_DENY);
	c = (acl_client) { "x", NULL, "192.168.2.200:1" };
	assert_int_equal(pub(a, &c, "a"), ACL_ALLOW);
	c.peer = "192.168.3.1:1";
	assert_int_equal(pub(a, &c, "a"), ACL_ALLOW);
	c.peer = "192.168.4.1:1";
	assert_int_equal(pub(a, &c, "a"), ACL_DENY);
	c.peer = "192.168.1.255:1";
	assert_int_equal(pub(a, &c, "a"), ACL_DENY);
	assert_int_equal(pub(a, &c, "b"), ACL_ALLOW);
	c.peer = "[2001::1]:1"; // IPv6 is not in 0.0.0.0/0
	assert_int_equal(pub(a, &c, "b"), ACL_DENY);
	c.peer = "8.8.8.8:53";
	assert_int_equal(pub(a, &c, "c"), ACL_ALLOW);
	c.peer = "8.8.8.9:53";
	assert_int_equal(pub(a, &c, "c"), ACL_DENY);
	c.peer = "[fc00::1]:1";
	assert_int_equal(pub(a, &c, "d"), ACL_ALLOW);
	c.peer = "[fdff::1]:1";
	assert_int_equal(pub(a, &c, "d"), ACL_ALLOW);
	c.peer = "[fe00::1]:1";
	assert_int_equal(pub(a, &c, "d"), ACL_DENY);
	assert_int_equal(pub(a, &c, "e"), ACL_DENY); // an empty list matches nobody
	acl_free(a);
}

static void test_and_or(void **state)
{
	(void)state;
	acl *a
	    = mk("[{\"permit\": \"allow\", \"and\": [{\"username\": \"u1\"}, {\"clientid\": "
	         "\"c1\"}], \"topics\": [\"and\"]},"
	         " {\"permit\": \"allow\", \"or\": [{\"username\": \"u2\"}, {\"ipaddr\": "
	         "\"10.0.0.0/8\"}], \"topics\": [\"or\"]},"
	         " {\"permit\": \"allow\", \"and\": [{\"username\": \"u3\", \"clientid\": \"c3\"}],"
	         "  \"or\": [{\"ipaddrs\": [\"1.1.1.1\", \"2.2.2.2\"]}], \"topics\": [\"both\"]},"
	         " {\"permit\": \"allow\", \"or\": [], \"topics\": [\"none\"]},"
	         " {\"permit\": \"allow\", \"and\": [], \"topics\": [\"all\"]}]",
	        ACL_DENY);
	acl_client c = { "c1", "u1", "192.168.0.1:1" };

	assert_int_equal(pub(a, &c, "and"), ACL_ALLOW);
	c.clientid = "c2";
	assert_int_equal(pub(a, &c, "and"), ACL_DENY);
	c = (acl_client) { "c1", NULL, NULL };
	assert_int_equal(pub(a, &c, "and"), ACL_DENY);

	c = (acl_client) { "x", "u2", "192.168.0.1:1" };
	assert_int_equal(pub(a, &c, "or"), ACL_ALLOW);
	c = (acl_client) { "x", "u9", "10.1.2.3:1" };
	assert_int_equal(pub(a, &c, "or"), ACL_ALLOW);
	c = (acl_client) { "x", "u9", "11.1.2.3:1" };
	assert_int_equal(pub(a, &c, "or"), ACL_DENY);

	c = (acl_client) { "c3", "u3", "2.2.2.2:1" };
	assert_int_equal(pub(a, &c, "both"), ACL_ALLOW);
	c.peer = "3.3.3.3:1";
	assert_int_equal(pub(a, &c, "both"), ACL_DENY);
	c = (acl_client) { "c4", "u3", "2.2.2.2:1" };
	assert_int_equal(pub(a, &c, "both"), ACL_DENY);

	assert_int_equal(pub(a, &c, "none"), ACL_DENY);
	assert_int_equal(pub(a, &c, "all"), ACL_ALLOW);
	acl_free(a);
}

static void test_actions(void **state)
{
	(void)state;
	acl       *a = mk("{\"rules\": ["
	                        " {\"permit\": \"allow\", \"action\": \"publish\", \"topics\": [\"p/#\"]},"
	                        " {\"permit\": \"allow\", \"action\": \"subscribe\", \"topics\": [\"s/#\"]},"
	                        " {\"permit\": \"allow\", \"action\": \"pubsub\", \"topics\": [\"ps/#\"]},"
	                        " {\"permit\": \"allow\", \"topics\": [\"d/#\"]}]}",
	          ACL_DENY);
	acl_client c = { "x", NULL, NULL };

	assert_int_equal(pub(a, &c, "p/1"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "p/1"), ACL_DENY);
	assert_int_equal(pub(a, &c, "s/1"), ACL_DENY);
	assert_int_equal(sub(a, &c, "s/1"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "s/#"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "ps/1"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "ps/+"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "d/1"), ACL_ALLOW); // default action is pubsub
	assert_int_equal(sub(a, &c, "d/1"), ACL_ALLOW);
	assert_int_equal(acl_check(a, &c, 3, "d/1", 3), ACL_DENY); // not one action
	assert_int_equal(acl_check(a, &c, 0, "d/1", 3), ACL_DENY);
	acl_free(a);
}

static void test_order_and_no_match(void **state)
{
	(void)state;
	const char *rules = "[{\"permit\": \"deny\", \"username\": \"eve\", \"topics\": [\"a/#\"]},"
	                    " {\"permit\": \"allow\", \"topics\": [\"a/b\"]},"
	                    " {\"permit\": \"deny\", \"topics\": [\"a/b\"]}]";
	acl_client  eve   = { "e", "eve", NULL };
	acl_client  bob   = { "b", "bob", NULL };

	for (int nm = ACL_ALLOW; nm <= ACL_DENY; nm++) {
		acl *a = mk(rules, nm);
		assert_int_equal(acl_rule_count(a), 3);
		assert_true(acl_enabled(a));
		assert_int_equal(pub(a, &eve, "a/b"), ACL_DENY); // first rule wins
		assert_int_equal(pub(a, &bob, "a/b"), ACL_ALLOW); // second rule wins
		assert_int_equal(pub(a, &bob, "a/c"), nm); // no rule: no_match
		assert_int_equal(pub(a, &eve, "z"), nm);
		assert_int_equal(acl_match(a, &bob, ACL_PUBLISH, "a/c", 3), ACL_NOMATCH);
		assert_int_equal(acl_match(a, &bob, ACL_PUBLISH, "a/b", 3), ACL_ALLOW);
		acl_free(a);
	}
	// No rules at all.
	acl *a = mk("{\"rules\": []}", ACL_DENY);
	assert_int_equal(pub(a, &bob, "x"), ACL_DENY);
	acl_free(a);
	a = mk("{}", ACL_ALLOW);
	assert_int_equal(pub(a, &bob, "x"), ACL_ALLOW);
	acl_free(a);
	a = acl_alloc(NULL, ACL_DENY, NULL, 0);
	assert_non_null(a);
	assert_int_equal(pub(a, &bob, "x"), ACL_DENY);
	acl_free(a);
}

static void test_disabled(void **state)
{
	(void)state;
	acl       *a = mk("{\"enable\": false, \"rules\": [{\"permit\": \"deny\"}]}", ACL_DENY);
	acl_client c = { "x", NULL, NULL };

	assert_false(acl_enabled(a));
	assert_int_equal(pub(a, &c, "x"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "#"), ACL_ALLOW);
	assert_int_equal(acl_match(a, &c, ACL_PUBLISH, "x", 1), ACL_NOMATCH);
	acl_free(a);
	// No acl at all allows everything.
	assert_int_equal(pub(NULL, &c, "x"), ACL_ALLOW);
	assert_false(acl_enabled(NULL));
	assert_int_equal(acl_rule_count(NULL), 0);
	assert_int_equal(acl_generation(NULL), 0);
	acl_free(NULL);
}

static void test_placeholders(void **state)
{
	(void)state;
	acl       *a = mk("[{\"permit\": \"allow\", \"topics\": [\"dev/${clientid}/#\", "
	                        "\"user/${username}/+\", \"both/${username}/${clientid}\", "
	                        "\"x-${clientid}-y\", \"@lit/${clientid}/#\"]}]",
	          ACL_DENY);
	acl_client c = { "d1", "u1", NULL };

	assert_int_equal(pub(a, &c, "dev/d1/temp"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "dev/d1"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "dev/d2/temp"), ACL_DENY);
	assert_int_equal(pub(a, &c, "dev/${clientid}/temp"), ACL_DENY);
	assert_int_equal(sub(a, &c, "dev/d1/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "dev/+/#"), ACL_DENY);
	assert_int_equal(pub(a, &c, "user/u1/x"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "user/u2/x"), ACL_DENY);
	assert_int_equal(pub(a, &c, "both/u1/d1"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "both/d1/u1"), ACL_DENY);
	assert_int_equal(pub(a, &c, "x-d1-y"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "lit/d1/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "lit/d1/+"), ACL_DENY);

	// No user name: ${username} never matches.
	c.username = NULL;
	assert_int_equal(pub(a, &c, "user//x"), ACL_DENY);
	assert_int_equal(pub(a, &c, "user/${username}/x"), ACL_DENY);
	assert_int_equal(pub(a, &c, "dev/d1/temp"), ACL_ALLOW);
	c.username = "";
	assert_int_equal(pub(a, &c, "user//x"), ACL_DENY);

	// Values holding wildcards or '/' cannot widen a rule.
	c = (acl_client) { "#", "+", NULL };
	assert_int_equal(sub(a, &c, "dev/#"), ACL_DENY);
	assert_int_equal(pub(a, &c, "dev/x/y"), ACL_DENY);
	assert_int_equal(sub(a, &c, "user/+/+"), ACL_DENY);
	c = (acl_client) { "a/b", "u", NULL };
	assert_int_equal(pub(a, &c, "dev/a/b/c"), ACL_DENY);
	c = (acl_client) { "", "u", NULL };
	assert_int_equal(pub(a, &c, "dev//c"), ACL_DENY);

	// Long values are substituted beyond the stack buffer.
	char id[1000];
	char topic[1100];
	memset(id, 'k', sizeof(id) - 1);
	id[sizeof(id) - 1] = '\0';
	c                  = (acl_client) { id, "u", NULL };
	snprintf(topic, sizeof(topic), "dev/%s/t", id);
	assert_int_equal(pub(a, &c, topic), ACL_ALLOW);
	snprintf(topic, sizeof(topic), "x-%s-y", id);
	assert_int_equal(pub(a, &c, topic), ACL_ALLOW);
	topic[5] = 'z';
	assert_int_equal(pub(a, &c, topic), ACL_DENY);
	acl_free(a);

	// Values so long that the filter exceeds any topic match nothing.
	char *huge = malloc(65536);
	memset(huge, 'h', 65535);
	huge[65535] = '\0';
	a           = mk("[{\"permit\": \"deny\", \"topics\": [\"${clientid}/${clientid}\", "
	                           "\"@${clientid}\"]}]",
	              ACL_ALLOW);
	c           = (acl_client) { huge, NULL, NULL };
	assert_int_equal(pub(a, &c, "x"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, huge), ACL_DENY); // the literal one matches
	c = (acl_client) { "me", NULL, NULL };
	assert_int_equal(pub(a, &c, "me/me"), ACL_DENY);
	assert_int_equal(sub(a, &c, "me"), ACL_DENY);
	assert_int_equal(sub(a, &c, "me/+"), ACL_ALLOW);
	acl_free(a);
	free(huge);

	// A deny rule with a placeholder.
	a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": "
	       "[\"inbox/${username}/private\"]}, {\"permit\": \"allow\"}]",
	    ACL_DENY);
	c = (acl_client) { "c", "zed", NULL };
	assert_int_equal(sub(a, &c, "inbox/zed/private"), ACL_DENY);
	assert_int_equal(sub(a, &c, "inbox/ann/private"), ACL_ALLOW);
	acl_free(a);
}

static void test_literal(void **state)
{
	(void)state;
	acl       *a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"@#\", "
	                        "\"@a/+\"]}, {\"permit\": \"allow\", \"topics\": [\"@x/y\"]}]",
	          ACL_ALLOW);
	acl_client c = { "c", NULL, NULL };

	assert_int_equal(sub(a, &c, "#"), ACL_DENY);
	assert_int_equal(sub(a, &c, "a/#"), ACL_ALLOW); // "#" literal only equals "#"
	assert_int_equal(sub(a, &c, "+/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "a/+"), ACL_DENY);
	assert_int_equal(sub(a, &c, "a/b"), ACL_ALLOW); // "a/+" literal does not expand
	assert_int_equal(sub(a, &c, "$share/g/#"), ACL_DENY);
	acl_free(a);

	a = mk("[{\"permit\": \"allow\", \"topics\": [\"@x/+\", \"@p/q\"]}]", ACL_DENY);
	assert_int_equal(pub(a, &c, "x/a"), ACL_DENY);
	assert_int_equal(sub(a, &c, "x/a"), ACL_DENY);
	assert_int_equal(sub(a, &c, "x/+"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "p/q"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "p/q"), ACL_ALLOW);
	assert_int_equal(pub(a, &c, "p/qq"), ACL_DENY);
	acl_free(a);
}

static void test_share(void **state)
{
	(void)state;
	acl *a
	    = mk("[{\"permit\": \"allow\", \"action\": \"subscribe\", \"topics\": [\"jobs/#\"]}]",
	        ACL_DENY);
	acl_client c = { "c", NULL, NULL };

	assert_int_equal(sub(a, &c, "$share/g1/jobs/a"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "$share/g1/jobs/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "$share/g1/other/#"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/jobs/x"), ACL_DENY); // group "jobs", filter "x"
	assert_int_equal(sub(a, &c, "$share//jobs/a"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/g1/"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/g1"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/g+/jobs/a"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/g1/jobs/#/x"), ACL_DENY);
	acl_free(a);

	// A "$share" rule filter does not match the stripped request.
	a = mk("[{\"permit\": \"deny\", \"topics\": [\"$share/g/#\"]}]", ACL_ALLOW);
	assert_int_equal(sub(a, &c, "$share/g/a"), ACL_ALLOW);
	acl_free(a);
}

static void test_bad_requests(void **state)
{
	(void)state;
	acl       *a = mk("[{\"permit\": \"allow\"}]", ACL_ALLOW);
	acl_client c = { "c", NULL, NULL };

	assert_int_equal(pub(a, &c, "a/+"), ACL_DENY);
	assert_int_equal(pub(a, &c, "#"), ACL_DENY);
	assert_int_equal(pub(a, &c, ""), ACL_DENY);
	assert_int_equal(sub(a, &c, ""), ACL_DENY);
	assert_int_equal(sub(a, &c, "a/#/b"), ACL_DENY);
	assert_int_equal(sub(a, &c, "a+"), ACL_DENY);
	assert_int_equal(acl_check(a, &c, ACL_PUBLISH, "a\0b", 3), ACL_DENY);
	assert_int_equal(acl_check(a, &c, ACL_PUBLISH, NULL, 0), ACL_DENY);
	assert_int_equal(pub(a, &c, "a/b"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "#"), ACL_ALLOW);
	assert_int_equal(sub(a, &c, "$SYS/#"), ACL_ALLOW); // no topics: every topic
	assert_int_equal(acl_check(a, NULL, ACL_PUBLISH, "a", 1), ACL_ALLOW);
	acl_free(a);
}

// Expects building the rules to fail with a message holding `why`.
static void expect_bad(const char *json, const char *why)
{
	char   err[256];
	cJSON *t = cJSON_Parse(json);
	acl   *a;

	if (t == NULL) {
		fail_msg("bad JSON in test: %s", json);
	}
	a = acl_alloc(t, ACL_ALLOW, err, sizeof(err));
	cJSON_Delete(t);
	if (a != NULL) {
		acl_free(a);
		fail_msg("accepted %s", json);
	}
	if (strstr(err, why) == NULL) {
		fail_msg("for %s: message \"%s\" lacks \"%s\"", json, err, why);
	}
}

static void test_build_errors(void **state)
{
	(void)state;
	expect_bad("{\"rules\": {}}", "auth.acl.rules: expected an array");
	expect_bad("{\"rules\": [1]}", "rules[0]: expected an object");
	expect_bad("[{}]", "rules[0]: permit");
	expect_bad("[{\"permit\": \"allow\"}, {\"permit\": \"maybe\"}]", "rules[1]: permit");
	expect_bad("[{\"permit\": true}]", "permit");
	expect_bad("[{\"permit\": \"allow\", \"action\": \"read\"}]", "action");
	expect_bad("[{\"permit\": \"allow\", \"action\": 1}]", "action");
	expect_bad("[{\"permit\": \"allow\", \"username\": 1}]", "username");
	expect_bad("[{\"permit\": \"allow\", \"clientid\": [\"a\"]}]", "clientid");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"1.2.3\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"1.2.3.4/33\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"1.2.3.4/\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"1.2.3.4/-1\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"::/129\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"::1/0128\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddr\": \"host.example\"}]", "not an IP address");
	expect_bad("[{\"permit\": \"allow\", \"ipaddrs\": [\"1.2.3.4\", 5]}]", "ipaddrs");
	expect_bad("[{\"permit\": \"allow\", \"and\": {\"username\": \"a\"}}]", "and");
	expect_bad("[{\"permit\": \"allow\", \"or\": [\"a\"]}]", "or");
	expect_bad("[{\"permit\": \"allow\", \"and\": [{\"or\": [{\"username\": \"a\"}]}]}]",
	    "only username");
	expect_bad("[{\"permit\": \"allow\", \"or\": [{\"topics\": [\"a\"]}]}]", "only username");
	expect_bad(
	    "[{\"permit\": \"allow\", \"topics\": [\"a/#/b\"]}]", "not a valid topic filter");
	expect_bad("[{\"permit\": \"allow\", \"topics\": [\"\"]}]", "not a valid topic filter");
	expect_bad("[{\"permit\": \"allow\", \"topics\": [\"@\"]}]", "not a valid topic filter");
	expect_bad("[{\"permit\": \"allow\", \"topics\": [\"a+\"]}]", "not a valid topic filter");
	expect_bad("[{\"permit\": \"allow\", \"topics\": [1]}]", "topics");
	// Messages quote input safely.
	expect_bad("[{\"permit\": \"al\\nlow\"}]", "al?low");
	// Bounds.
	cJSON *r   = cJSON_CreateArray();
	cJSON *one = cJSON_CreateObject();
	cJSON *ips = cJSON_AddArrayToObject(one, "ipaddrs");
	cJSON_AddStringToObject(one, "permit", "allow");
	for (int i = 0; i <= ACL_MAX_ITEMS; i++) {
		cJSON_AddItemToArray(ips, cJSON_CreateString("10.0.0.1"));
	}
	cJSON_AddItemToArray(r, one);
	char err[256];
	assert_null(acl_alloc(r, ACL_ALLOW, err, sizeof(err)));
	assert_non_null(strstr(err, "more than"));
	cJSON_Delete(r);
	// Unknown keys are ignored; a single string is accepted for topics.
	acl *a = mk("[{\"permit\": \"deny\", \"comment\": 1, \"topics\": \"a/#\"}]", ACL_ALLOW);
	acl_client c = { "c", NULL, NULL };
	assert_int_equal(pub(a, &c, "a/b"), ACL_DENY);
	assert_int_equal(pub(a, &c, "b"), ACL_ALLOW);
	acl_free(a);
}

static void test_generation(void **state)
{
	(void)state;
	acl *a = mk("[]", ACL_ALLOW);
	acl *b = mk("[]", ACL_ALLOW);

	assert_true(acl_generation(a) != 0);
	assert_true(acl_generation(a) != acl_generation(b));
	acl_free(a);
	acl_free(b);
}

// Returns the repository root derived from __FILE__ in buf, or NULL.
static const char *repo_root(char *buf, size_t len)
{
	const char *f = __FILE__;
	const char *p = strstr(f, "/tests/unit/test_acl.c");

	if (f[0] != '/' || p == NULL || (size_t)(p - f) >= len) {
		return NULL;
	}
	memcpy(buf, f, (size_t)(p - f));
	buf[p - f] = '\0';
	return buf;
}

// Loads HOCON text through the configuration layer and builds the acl.
static acl *from_conf(const char *text)
{
	nmq_conf    conf;
	conf_errors errs;
	char        err[256];
	acl        *a;

	if (conf_load_text(&conf, text, strlen(text), "t.conf", NULL, &errs) != 0) {
		fail_msg("%s", errs.n_errors > 0 ? errs.errors[0] : "conf_load_text failed");
	}
	conf_errors_free(&errs);
	a = acl_alloc(conf.auth_acl, conf.auth_no_match == CONF_ACL_DENY ? ACL_DENY : ACL_ALLOW,
	    err, sizeof(err));
	conf_free(&conf);
	if (a == NULL) {
		fail_msg("%s", err);
	}
	return a;
}

// Rules as NanoMQ users write them, through the HOCON reader.
static void test_nanomq_style(void **state)
{
	(void)state;
	const char *text
	    = "auth {\n"
	      "  no_match = allow\n"
	      "  acl = {\n"
	      "    rules = [\n"
	      "      ## comments as in NanoMQ's files\n"
	      "      {\"permit\": \"allow\", \"username\": \"dashboard\", \"action\": "
	      "\"subscribe\", "
	      "\"topics\": [\"$SYS/#\"]}\n"
	      "      {\"permit\": \"allow\", \"ipaddr\": \"127.0.0.1\", \"action\": \"pubsub\", "
	      "\"topics\": [\"$SYS/#\", \"#\"]}\n"
	      "      {\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"$SYS/#\", "
	      "\"@#\"]}\n"
	      "      {permit: deny, clientid: \"bad-*\", topics: [\"#\"]}\n"
	      "      {\"permit\": \"allow\"}\n"
	      "    ]\n"
	      "  }\n"
	      "}\n";
	acl       *a    = from_conf(text);
	acl_client dash = { "d", "dashboard", "192.168.1.5:40000" };
	acl_client loc  = { "l", NULL, "127.0.0.1:40001" };
	acl_client any  = { "x", "someone", "192.168.1.6:40002" };

	assert_int_equal(acl_rule_count(a), 5);
	assert_int_equal(sub(a, &dash, "$SYS/brokers/+/clients/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &dash, "#"), ACL_DENY);
	assert_int_equal(sub(a, &dash, "a/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &loc, "$SYS/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &loc, "#"), ACL_ALLOW);
	assert_int_equal(pub(a, &loc, "$SYS/x"), ACL_ALLOW);
	assert_int_equal(sub(a, &any, "$SYS/#"), ACL_DENY);
	assert_int_equal(sub(a, &any, "$SYS/brokers"), ACL_DENY);
	assert_int_equal(sub(a, &any, "#"), ACL_DENY);
	assert_int_equal(sub(a, &any, "$share/g/#"), ACL_DENY);
	assert_int_equal(sub(a, &any, "sensors/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &any, "+/#"), ACL_ALLOW);
	assert_int_equal(pub(a, &any, "sensors/1"), ACL_ALLOW);
	acl_client star = { "bad-*", NULL, NULL }; // clientid compared literally
	assert_int_equal(pub(a, &star, "x"), ACL_DENY);
	star.clientid = "bad-1";
	assert_int_equal(pub(a, &star, "x"), ACL_ALLOW);
	acl_free(a);

	// The shipped example file, included.
	char root[512];
	char inc[700];
	if (repo_root(root, sizeof(root)) == NULL) {
		return;
	}
	snprintf(inc, sizeof(inc),
	    "auth.no_match = deny\nauth.acl = {include \"%s/etc/nanomq_acl.conf\"}\n", root);
	a = from_conf(inc);
	assert_true(acl_enabled(a));
	assert_int_equal(sub(a, &dash, "$SYS/#"), ACL_ALLOW);
	assert_int_equal(sub(a, &any, "$SYS/#"), ACL_DENY);
	assert_int_equal(sub(a, &any, "#"), ACL_DENY);
	assert_int_equal(sub(a, &loc, "#"), ACL_ALLOW);
	assert_int_equal(pub(a, &any, "a/b"), ACL_ALLOW);
	acl_free(a);
}

static void test_cache(void **state)
{
	(void)state;
	acl       *a     = mk("[{\"permit\": \"allow\", \"topics\": [\"ok/#\"]}]", ACL_DENY);
	acl       *b     = mk("[{\"permit\": \"allow\", \"topics\": [\"no/#\"]}]", ACL_DENY);
	acl_client c     = { "c", NULL, NULL };
	acl_cache *cache = acl_cache_alloc(3, 1000);

	assert_non_null(cache);
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_PUBLISH, "ok/1", 4, 0), ACL_ALLOW);
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_PUBLISH, "no/1", 4, 0), ACL_DENY);
	assert_int_equal(acl_cache_size(cache), 2);
	// Hits, and publish/subscribe are kept apart.
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_PUBLISH, "ok/1", 4, 10), ACL_ALLOW);
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_SUBSCRIBE, "ok/1", 4, 10), ACL_ALLOW);
	assert_int_equal(acl_cache_size(cache), 3);
	// Bounded: a fourth entry replaces the oldest.
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_PUBLISH, "ok/2", 4, 20), ACL_ALLOW);
	assert_int_equal(acl_cache_size(cache), 3);
	// A new acl (reload) flushes: the cached answers of `a` are not reused.
	assert_int_equal(acl_cache_check(cache, b, &c, ACL_PUBLISH, "ok/1", 4, 30), ACL_DENY);
	assert_int_equal(acl_cache_size(cache), 1);
	assert_int_equal(acl_cache_check(cache, b, &c, ACL_PUBLISH, "no/1", 4, 30), ACL_ALLOW);
	// Expiry: with the same acl, entries are recomputed after ttl.
	assert_int_equal(acl_cache_check(cache, b, &c, ACL_PUBLISH, "no/1", 4, 1029), ACL_ALLOW);
	assert_int_equal(acl_cache_check(cache, b, &c, ACL_PUBLISH, "no/1", 4, 5000), ACL_ALLOW);
	// Long topics are answered but not cached.
	char long_topic[ACL_CACHE_TOPIC_MAX + 10];
	memset(long_topic, 'n', sizeof(long_topic));
	memcpy(long_topic, "no/", 3);
	size_t before = acl_cache_size(cache);
	assert_int_equal(
	    acl_cache_check(cache, b, &c, ACL_PUBLISH, long_topic, sizeof(long_topic), 0),
	    ACL_ALLOW);
	assert_int_equal(acl_cache_size(cache), before);
	acl_cache_flush(cache);
	assert_int_equal(acl_cache_size(cache), 0);
	acl_cache_free(cache);

	// A disabled cache, a NULL cache.
	cache = acl_cache_alloc(32, 0);
	assert_int_equal(acl_cache_check(cache, a, &c, ACL_PUBLISH, "ok/1", 4, 0), ACL_ALLOW);
	assert_int_equal(acl_cache_size(cache), 0);
	acl_cache_free(cache);
	assert_int_equal(acl_cache_check(NULL, a, &c, ACL_PUBLISH, "no", 2, 0), ACL_DENY);
	acl_cache_free(NULL);
	acl_free(a);
	acl_free(b);
}

static int rd(const acl *a, const acl_client *who, const char *topic)
{
	return acl_check_read(a, who, topic, strlen(topic));
}

static bool may_deny(const acl *a, const acl_client *who, const char *filter)
{
	return acl_filter_may_deny(a, who, filter, strlen(filter));
}

static bool overlap(const char *x, const char *y)
{
	return acl_filters_overlap(x, strlen(x), y, strlen(y));
}

// Read access at delivery: subscribe access to the exact topic name.
static void test_read_check(void **state)
{
	(void)state;
	// The case that motivated it: bob may subscribe to a/# but not read
	// a/secret through it.
	const char *rules = "[{\"permit\": \"deny\", \"username\": \"bob\", \"action\": "
	                    "\"subscribe\", \"topics\": [\"a/secret\"]},"
	                    " {\"permit\": \"allow\", \"action\": \"subscribe\", \"topics\": "
	                    "[\"a/#\"]}]";
	acl_client  bob   = { "b1", "bob", NULL };
	acl_client  alice = { "a1", "alice", NULL };

	for (int nm = ACL_ALLOW; nm <= ACL_DENY; nm++) {
		acl *a = mk(rules, nm);
		assert_int_equal(sub(a, &bob, "a/#"), ACL_ALLOW);
		assert_int_equal(rd(a, &bob, "a/secret"), ACL_DENY);
		assert_int_equal(rd(a, &bob, "a/public"), ACL_ALLOW);
		assert_int_equal(rd(a, &bob, "a/secret/x"), ACL_ALLOW);
		assert_int_equal(rd(a, &bob, "a"), ACL_ALLOW); // "a/#" matches "a"
		assert_int_equal(rd(a, &alice, "a/secret"), ACL_ALLOW);
		// No rule: no_match, as for a SUBSCRIBE to that exact topic.
		assert_int_equal(rd(a, &bob, "b/x"), nm);
		assert_int_equal(rd(a, &bob, "b/x"), sub(a, &bob, "b/x"));
		// Names only: a wildcard or an empty name is refused.
		assert_int_equal(rd(a, &alice, "a/+"), ACL_DENY);
		assert_int_equal(rd(a, &alice, "a/#"), ACL_DENY);
		assert_int_equal(rd(a, &alice, ""), ACL_DENY);
		assert_int_equal(acl_check_read(a, &alice, NULL, 0), ACL_DENY);
		assert_int_equal(acl_check_read(a, &alice, "a/b\0c", 5), ACL_DENY);
		acl_free(a);
	}

	// Publish-only rules do not decide reading.
	acl *a = mk(
	    "[{\"permit\": \"deny\", \"action\": \"publish\", \"topics\": [\"p/#\"]}]", ACL_ALLOW);
	acl_client c = { "c", NULL, NULL };
	assert_int_equal(rd(a, &c, "p/x"), ACL_ALLOW);
	acl_free(a);

	// "@": a literal name applies to that name; a literal holding a
	// wildcard never applies to a name (a SUBSCRIBE to the name would not
	// match it either).
	a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"@l/#\", "
	       "\"@l/x\"]}]",
	    ACL_ALLOW);
	assert_int_equal(rd(a, &c, "l/x"), ACL_DENY);
	assert_int_equal(rd(a, &c, "l/y"), ACL_ALLOW);
	assert_int_equal(rd(a, &c, "l"), ACL_ALLOW);
	acl_free(a);

	// Placeholders are the reader's values.
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"inbox/${username}/#\", "
	       "\"dev/${clientid}\"]}]",
	    ACL_DENY);
	c = (acl_client) { "d7", "zed", NULL };
	assert_int_equal(rd(a, &c, "inbox/zed/1"), ACL_ALLOW);
	assert_int_equal(rd(a, &c, "inbox/ann/1"), ACL_DENY);
	assert_int_equal(rd(a, &c, "dev/d7"), ACL_ALLOW);
	assert_int_equal(rd(a, &c, "dev/d8"), ACL_DENY);
	c.username = NULL;
	assert_int_equal(rd(a, &c, "inbox//1"), ACL_DENY);
	acl_free(a);

	// A "$share/" prefix is part of a name; '$' names escape leading
	// wildcards.
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"x/#\", \"#\"]}]", ACL_DENY);
	assert_int_equal(rd(a, &c, "$share/g/x/1"), ACL_DENY);
	assert_int_equal(sub(a, &c, "$share/g/x/1"), ACL_ALLOW); // a shared filter
	assert_int_equal(rd(a, &c, "$SYS/x"), ACL_DENY);
	assert_int_equal(rd(a, &c, "y/$SYS"), ACL_ALLOW);
	acl_free(a);

	// Disabled or absent: everything may be read.
	a = mk("{\"enable\": false, \"rules\": [{\"permit\": \"deny\"}]}", ACL_DENY);
	assert_int_equal(rd(a, &c, "x"), ACL_ALLOW);
	assert_int_equal(rd(NULL, &c, "x"), ACL_ALLOW);
	assert_int_equal(acl_check_read(NULL, NULL, "x", 1), ACL_ALLOW);
	acl_free(a);
}

static void test_overlap_table(void **state)
{
	(void)state;
	static const struct {
		const char *x;
		const char *y;
		bool        want;
	} t[] = {
		{ "a/b", "a/b", true },
		{ "a/b", "a/c", false },
		{ "a/+", "a/b", true },
		{ "a/+", "+/b", true },
		{ "a/+", "b/+", false },
		{ "a/#", "a", true }, // "a/#" matches "a"
		{ "a/+", "a", false },
		{ "a/#", "+/b/c", true },
		{ "a/b/#", "a/+", true },
		{ "a/b/c", "a/+", false },
		{ "+/+", "#", true },
		{ "#", "$SYS/x", false },
		{ "+/x", "$SYS/x", false },
		{ "$SYS/#", "$SYS/+", true },
		{ "$SYS/#", "+/#", false },
		{ "a/$x", "a/+", true },
		{ "/", "+/+", true },
		{ "/", "+", false },
		{ "", "a", false },
		{ "a/#/b", "a", false },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (overlap(t[i].x, t[i].y) != t[i].want || overlap(t[i].y, t[i].x) != t[i].want) {
			fail_msg("overlap(\"%s\", \"%s\") should be %s", t[i].x, t[i].y,
			    t[i].want ? "true" : "false");
		}
	}
}

// overlap(X, Y) holds exactly when some topic is matched by both, over
// every small filter pair and every small topic.
static void test_overlap_exact(void **state)
{
	(void)state;
	static const char *const flv[] = { "a", "b", "$x", "", "+", "#" };
	static const char *const tlv[] = { "a", "b", "$x", "", "c" };
	static char              f[2000][16];
	static char              tp[2000][16];
	static bool              hit[300][800]; // hit[i][k]: f[i] matches tp[k]
	size_t                   nf = gen(f, 2000, flv, 6, 3);
	size_t                   nt = gen(tp, 2000, tlv, 5, 4);

	assert_true(nf <= 300 && nt <= 800);
	for (size_t i = 0; i < nf; i++) {
		for (size_t k = 0; k < nt; k++) {
			hit[i][k] = topic_filter_match(f[i], strlen(f[i]), tp[k], strlen(tp[k]));
		}
	}
	for (size_t i = 0; i < nf; i++) {
		if (!mqtt_topic_filter_valid((const uint8_t *)f[i], strlen(f[i]))) {
			continue;
		}
		for (size_t j = 0; j < nf; j++) {
			if (!mqtt_topic_filter_valid((const uint8_t *)f[j], strlen(f[j]))) {
				continue;
			}
			const char *witness = NULL;
			for (size_t k = 0; k < nt && witness == NULL; k++) {
				if (hit[i][k] && hit[j][k]) {
					witness = tp[k];
				}
			}
			if (overlap(f[i], f[j]) != (witness != NULL)) {
				fail_msg("overlap(\"%s\", \"%s\") is %s (witness %s)", f[i], f[j],
				    witness != NULL ? "false" : "true",
				    witness != NULL ? witness : "none");
			}
		}
	}
}

// The SUBSCRIBE-time analysis on hand-picked cases.
static void test_may_deny_cases(void **state)
{
	(void)state;
	acl_client bob   = { "b1", "bob", "10.1.2.3:4000" };
	acl_client alice = { "a1", "alice", "127.0.0.1:4001" };
	acl_client anon  = { "n1", NULL, NULL };

	// A deny for one topic under the allowed filter.
	const char *rules = "[{\"permit\": \"deny\", \"username\": \"bob\", \"action\": "
	                    "\"subscribe\", \"topics\": [\"a/secret\"]},"
	                    " {\"permit\": \"allow\", \"action\": \"subscribe\", \"topics\": "
	                    "[\"a/#\"]}]";
	for (int nm = ACL_ALLOW; nm <= ACL_DENY; nm++) {
		acl *a = mk(rules, nm);
		assert_true(may_deny(a, &bob, "a/#"));
		assert_true(may_deny(a, &bob, "a/+"));
		assert_true(may_deny(a, &bob, "+/secret"));
		assert_true(may_deny(a, &bob, "$share/g/a/#"));
		assert_false(may_deny(a, &bob, "a/public"));
		assert_false(may_deny(a, &bob, "a/+/x")); // a/secret is not under it
		assert_false(may_deny(a, &alice, "a/#")); // the deny is bob's
		// Outside every rule: no_match decides.
		assert_int_equal(may_deny(a, &bob, "b/#"), nm == ACL_DENY);
		assert_int_equal(may_deny(a, &alice, "+/#"), nm == ACL_DENY);
		acl_free(a);
	}

	// First match wins: an allow that covers the filter before the deny
	// makes the deny unreachable; after it, it is not.
	acl *a = mk("[{\"permit\": \"allow\", \"topics\": [\"a/#\"]},"
	            " {\"permit\": \"deny\", \"topics\": [\"a/secret\", \"b/#\"]}]",
	    ACL_ALLOW);
	assert_false(may_deny(a, &bob, "a/#"));
	assert_false(may_deny(a, &bob, "a/+"));
	assert_true(may_deny(a, &bob, "+/#")); // b/... reaches the deny
	assert_true(may_deny(a, &bob, "b/x"));
	assert_false(may_deny(a, &bob, "c/#"));
	acl_free(a);
	// A partial allow does not shield a later overlapping deny.
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"a/x\"]},"
	       " {\"permit\": \"deny\", \"topics\": [\"a/+\"]}]",
	    ACL_ALLOW);
	assert_true(may_deny(a, &bob, "a/#"));
	assert_false(may_deny(a, &bob, "a/x"));
	assert_true(may_deny(a, &bob, "a/y"));
	acl_free(a);
	// With no_match = deny, allows that only together cover the filter
	// are not recognised (conservative).
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"a\", \"a/+/#\"]}]", ACL_DENY);
	assert_true(may_deny(a, &bob, "a/#"));
	assert_false(may_deny(a, &bob, "a/b/#"));
	acl_free(a);
	// A rule with no topics covers everything; an empty topic list nothing.
	a = mk("[{\"permit\": \"allow\", \"username\": \"alice\"},"
	       " {\"permit\": \"deny\", \"topics\": []}]",
	    ACL_DENY);
	assert_false(may_deny(a, &alice, "#"));
	assert_true(may_deny(a, &bob, "x"));
	acl_free(a);
	// Publish-only rules are not about reading.
	a = mk("[{\"permit\": \"deny\", \"action\": \"publish\"}]", ACL_ALLOW);
	assert_false(may_deny(a, &bob, "#"));
	acl_free(a);
	// pubsub rules are.
	a = mk("[{\"permit\": \"deny\", \"topics\": [\"z\"]}]", ACL_ALLOW);
	assert_true(may_deny(a, &bob, "#"));
	assert_false(may_deny(a, &bob, "z/+"));
	acl_free(a);

	// Placeholders take the client's values; a missing value makes the
	// rule match nothing.
	a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": "
	       "[\"inbox/${username}/private\"]}, {\"permit\": \"allow\"}]",
	    ACL_DENY);
	assert_true(may_deny(a, &bob, "inbox/bob/#"));
	assert_true(may_deny(a, &bob, "inbox/+/private"));
	assert_false(may_deny(a, &bob, "inbox/ann/#"));
	assert_false(may_deny(a, &anon, "inbox/+/private"));
	acl_free(a);
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"dev/${clientid}/#\"]}]", ACL_DENY);
	assert_false(may_deny(a, &bob, "dev/b1/#"));
	assert_false(may_deny(a, &bob, "dev/b1"));
	assert_true(may_deny(a, &bob, "dev/+/#"));
	assert_true(may_deny(a, &bob, "dev/a1/#"));
	acl_free(a);

	// "@": a literal name denies that name only; a literal wildcard
	// filter never applies to a delivered name.
	a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"@a/#\"]}]",
	    ACL_ALLOW);
	assert_false(may_deny(a, &bob, "a/#"));
	assert_false(may_deny(a, &bob, "#"));
	acl_free(a);
	a = mk("[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"@a/b\"]}]",
	    ACL_ALLOW);
	assert_true(may_deny(a, &bob, "a/+"));
	assert_true(may_deny(a, &bob, "a/b"));
	assert_false(may_deny(a, &bob, "a/c"));
	acl_free(a);
	a = mk("[{\"permit\": \"allow\", \"topics\": [\"@x/y\", \"@x/+\"]}]", ACL_DENY);
	assert_false(may_deny(a, &bob, "x/y"));
	assert_true(may_deny(a, &bob, "x/+")); // "@x/+" is no name
	acl_free(a);

	// '$' names are not under a leading wildcard.
	a = mk(
	    "[{\"permit\": \"deny\", \"action\": \"subscribe\", \"topics\": [\"#\"]}]", ACL_ALLOW);
	assert_false(may_deny(a, &bob, "$SYS/#"));
	assert_true(may_deny(a, &bob, "a"));
	acl_free(a);

	// Addresses: the subject is decided for the client at hand.
	a = mk("[{\"permit\": \"deny\", \"ipaddrs\": [\"10.0.0.0/8\"], \"topics\": [\"a/b\"]}]",
	    ACL_ALLOW);
	assert_true(acl_uses_peer(a));
	assert_true(may_deny(a, &bob, "a/#"));
	assert_false(may_deny(a, &alice, "a/#"));
	acl_free(a);
	a = mk("[{\"permit\": \"deny\", \"or\": [{\"username\": \"x\"}, {\"ipaddr\": "
	       "\"1.2.3.4\"}]}]",
	    ACL_ALLOW);
	assert_true(acl_uses_peer(a));
	acl_free(a);
	a = mk(rules, ACL_ALLOW);
	assert_false(acl_uses_peer(a));
	assert_false(acl_uses_peer(NULL));

	// Bad input is assumed deniable; no acl denies nothing.
	assert_true(may_deny(a, &bob, ""));
	assert_true(may_deny(a, &bob, "a/#/b"));
	assert_true(may_deny(a, &bob, "$share/g"));
	assert_true(acl_filter_may_deny(a, &bob, NULL, 0));
	acl_free(a);
	assert_false(may_deny(NULL, &bob, "#"));
	a = mk("{\"enable\": false, \"rules\": [{\"permit\": \"deny\"}]}", ACL_DENY);
	assert_false(may_deny(a, &bob, "#"));
	acl_free(a);
}

// Soundness: whenever the analysis says a filter cannot be denied, no name
// it matches is denied, for a set of rule lists (both no_match values) and
// clients over every small filter and topic. Also checks that acl_check_read
// equals a SUBSCRIBE check of the same name, and that the analysis is not
// trivially "always deniable".
static void test_may_deny_sound(void **state)
{
	(void)state;
	static const char *const rule_sets[] = {
		"[{\"permit\": \"deny\", \"username\": \"b\", \"action\": \"subscribe\", "
		"\"topics\": "
		"[\"a/b\"]}, {\"permit\": \"allow\", \"action\": \"subscribe\", \"topics\": "
		"[\"a/#\"]}]",
		"[{\"permit\": \"allow\", \"topics\": [\"a/+\"]}, {\"permit\": \"deny\", "
		"\"topics\": "
		"[\"+/b\", \"$x/#\"]}, {\"permit\": \"allow\", \"topics\": [\"#\"]}]",
		"[{\"permit\": \"deny\", \"topics\": [\"${clientid}/#\"]}, {\"permit\": \"allow\", "
		"\"topics\": [\"${username}/+\", \"@a/b\", \"@a/+\"]}]",
		"[{\"permit\": \"allow\", \"topics\": [\"@b\", \"b/+/a\"]}, {\"permit\": \"deny\", "
		"\"action\": \"subscribe\", \"topics\": [\"@b/#\", \"/+\", \"+//#\"]}]",
		"[{\"permit\": \"deny\", \"clientid\": \"a\", \"topics\": [\"$x/+\", \"a\"]}, "
		"{\"permit\": \"allow\", \"username\": \"b\", \"topics\": [\"+/#\", \"$x/#\"]}, "
		"{\"permit\": \"deny\", \"action\": \"publish\", \"topics\": [\"#\"]}]",
		"[{\"permit\": \"allow\", \"ipaddr\": \"10.0.0.1\", \"topics\": [\"a/#\"]}, "
		"{\"permit\": \"deny\", \"topics\": [\"a/a\", \"b/${username}\"]}]",
	};
	static const acl_client clients[] = {
		{ "a", "b", "10.0.0.1:1" },
		{ "b", NULL, "10.0.0.2:1" },
		{ "c", "a", NULL },
	};
	static const char *const flv[] = { "a", "b", "$x", "", "+", "#" };
	static const char *const tlv[] = { "a", "b", "$x", "", "c" };
	static char              f[2000][16];
	static char              tp[2000][16];
	static int               allowed[2000];
	size_t                   nf       = gen(f, 2000, flv, 6, 3);
	size_t                   nt       = gen(tp, 2000, tlv, 5, 4);
	size_t                   safe     = 0;
	size_t                   deniable = 0;

	for (size_t r = 0; r < sizeof(rule_sets) / sizeof(rule_sets[0]); r++) {
		for (int nm = ACL_ALLOW; nm <= ACL_DENY; nm++) {
			acl *a = mk(rule_sets[r], nm);
			for (size_t ci = 0; ci < sizeof(clients) / sizeof(clients[0]); ci++) {
				const acl_client *c = &clients[ci];
				for (size_t k = 0; k < nt; k++) {
					allowed[k] = rd(a, c, tp[k]);
					if (allowed[k] != sub(a, c, tp[k])) {
						fail_msg("rules %zu: read(\"%s\") differs from a "
						         "SUBSCRIBE to it",
						    r, tp[k]);
					}
				}
				for (size_t i = 0; i < nf; i++) {
					size_t fl = strlen(f[i]);
					if (!mqtt_topic_filter_valid((const uint8_t *)f[i], fl)) {
						continue;
					}
					if (may_deny(a, c, f[i])) {
						deniable++;
						continue;
					}
					safe++;
					for (size_t k = 0; k < nt; k++) {
						if (allowed[k] != ACL_ALLOW
						    && topic_filter_match(
						        f[i], fl, tp[k], strlen(tp[k]))) {
							fail_msg("rules %zu no_match %d client %s: "
							         "\"%s\" "
							         "said safe, but \"%s\" is denied",
							    r, nm, c->clientid, f[i], tp[k]);
						}
					}
				}
			}
			acl_free(a);
		}
	}
	assert_true(safe > 500);
	assert_true(deniable > 500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_covers_table),
		cmocka_unit_test(test_covers_exact),
		cmocka_unit_test(test_subjects),
		cmocka_unit_test(test_and_or),
		cmocka_unit_test(test_actions),
		cmocka_unit_test(test_order_and_no_match),
		cmocka_unit_test(test_disabled),
		cmocka_unit_test(test_placeholders),
		cmocka_unit_test(test_literal),
		cmocka_unit_test(test_share),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_build_errors),
		cmocka_unit_test(test_generation),
		cmocka_unit_test(test_nanomq_style),
		cmocka_unit_test(test_cache),
		cmocka_unit_test(test_read_check),
		cmocka_unit_test(test_overlap_table),
		cmocka_unit_test(test_overlap_exact),
		cmocka_unit_test(test_may_deny_cases),
		cmocka_unit_test(test_may_deny_sound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
