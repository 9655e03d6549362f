// Our mbed TLS configurations and handshake checks; see tls_engine.h.
#include "nng/transport/tls_engine.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nng/supplemental/tls/tls.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>
#endif

#include <arpa/inet.h>
#include <mbedtls/aesni.h>
#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_cache.h>
#include <mbedtls/ssl_ciphersuites.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

#include "nng/core/log.h"

// One certificate + key pair given with own_cert (a server may have
// several, e.g. RSA and ECDSA).
typedef struct own_cert {
	mbedtls_x509_crt   crt;
	mbedtls_pk_context key;
	struct own_cert   *next;
} own_cert;

// Room for the cipher suite and group lists a configuration hands to
// mbed TLS (which keeps pointers to them). 2.28 knows ~150 suites.
#define MAX_SUITES 200
#define MAX_GROUPS 16

typedef struct tls_cfg {
	mbedtls_ssl_config   conf;
	int                  suites[MAX_SUITES + 1]; // 0-terminated
	mbedtls_ecp_group_id groups[MAX_GROUPS + 1]; // NONE-terminated
	// Server only: resumption state, shared by the connections of this
	// configuration (mbed TLS locks both). A reload makes a new
	// configuration, so tickets and cached sessions of the old one, which
	// may name a client certificate the new CA would refuse, do not resume.
	mbedtls_ssl_ticket_context ticket;
	mbedtls_ssl_cache_context  cache;
	bool                       resumption;
	mbedtls_x509_crt           ca;
	mbedtls_x509_crl           crl;
	bool                       have_ca;
	bool                       have_crl;
	own_cert                  *certs;
	nng_tls_mode               mode;
	nng_tls_auth_mode          auth;
} tls_cfg;

// The process-wide random generator. mbed TLS may or may not be built
// with its own locking, so calls go through rng_lock.
static mbedtls_entropy_context  rng_entropy;
static mbedtls_ctr_drbg_context rng_drbg;
static pthread_mutex_t          rng_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t rng_once = PTHREAD_ONCE_INIT;
static int            rng_rv   = NNG_ECRYPTO;

// Random bytes for mbed TLS. Returns 0 or an mbed TLS error.
static int rng_random(void *arg, unsigned char *buf, size_t len)
{
	(void)arg;
	pthread_mutex_lock(&rng_lock);
	int rv = mbedtls_ctr_drbg_random(&rng_drbg, buf, len);
	pthread_mutex_unlock(&rng_lock);
	return rv;
}

// ---------------------------------------------------------------------------
// Groups, cipher suites, CPU

// Aliases for group names that mbed TLS does not know by itself.
static const struct {
	const char *alias;
	const char *name;
} group_alias[] = {
	{ "p-256", "secp256r1" },
	{ "prime256v1", "secp256r1" },
	{ "p-384", "secp384r1" },
	{ "p-521", "secp521r1" },
	{ "curve25519", "x25519" },
};

// True when the CPU has AES instructions; see tls_engine.h. mbed TLS 2.28
// uses AES-NI (with PCLMULQDQ for GCM) on x86-64; it has no code for the
// ARMv8 crypto extension (3.5's AESCE), so there the HWCAP bit alone does
// not make AES fast.
static bool cpu_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	if (__get_cpuid(1, &a, &b, &c, &d) == 0) {
		return false;
	}
	bool hw = (c & bit_AES) != 0 && (c & bit_PCLMUL) != 0;
#if defined(MBEDTLS_AESNI_C) && defined(MBEDTLS_HAVE_X86_64)
	return hw && mbedtls_aesni_has_support(MBEDTLS_AESNI_AES)
	    && mbedtls_aesni_has_support(MBEDTLS_AESNI_CLMUL);
#else
	(void)hw;
	return false; // software AES: ChaCha20 is faster
#endif
#elif defined(__aarch64__) && defined(HWCAP_AES)
	bool hw = (getauxval(AT_HWCAP) & HWCAP_AES) != 0;
#if defined(MBEDTLS_AESCE_C)
	return hw;
#else
	(void)hw;
	return false;
#endif
#elif defined(__arm__) && defined(HWCAP2_AES)
	bool hw = (getauxval(AT_HWCAP2) & HWCAP2_AES) != 0;
#if defined(MBEDTLS_AESCE_C)
	return hw;
#else
	(void)hw;
	return false;
#endif
#else
	return false;
#endif
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static bool           cpu_aes_fast;

static void cpu_probe(void)
{
	cpu_aes_fast = cpu_aes();
}

bool tls_engine_aes_fast(void)
{
	pthread_once(&cpu_once, cpu_probe);
	return cpu_aes_fast;
}

const char *tls_engine_defaults_text(void)
{
	return tls_engine_aes_fast() ? "groups=" TLS_ENGINE_DEFAULT_GROUPS
	                               " ciphers=AES-GCM first (CPU has AES instructions)"
	                             : "groups=" TLS_ENGINE_DEFAULT_GROUPS
	                               " ciphers=ChaCha20-Poly1305 first (no AES "
	                               "instructions in use)";
}

// Copies the next name of a ':', ',' or blank separated list into tok
// (lower case when lower is set), and advances *sp. Returns false at the
// end of the list or for a name longer than toklen-1 (then tok holds its
// start, for the error message).
static bool next_name(const char **sp, char *tok, size_t toklen, bool lower, bool *too_long)
{
	const char *s = *sp;
	size_t      n = 0;
	*too_long     = false;
	while (*s == ':' || *s == ',' || isspace((unsigned char)*s)) {
		s++;
	}
	if (*s == '\0') {
		*sp = s;
		return false;
	}
	while (*s != '\0' && *s != ':' && *s != ',' && !isspace((unsigned char)*s)) {
		if (n + 1 < toklen) {
			char ch  = *s;
			tok[n++] = lower ? (char)tolower((unsigned char)ch)
			                 : (char)toupper((unsigned char)ch);
		} else {
			*too_long = true;
		}
		s++;
	}
	tok[n] = '\0';
	*sp    = s;
	return true;
}

// Fills out (NONE-terminated) from a group list, or with the defaults for
// NULL/"". Returns 0, or NNG_EINVAL with a message.
static int parse_groups(const char *list, mbedtls_ecp_group_id *out, char *err, size_t errlen)
{
	static const char *defaults[] = { "x25519", "secp256r1", "secp384r1" };
	size_t             n          = 0;
	char               tok[64];
	bool               too_long;

	if (list == NULL || list[0] == '\0') {
		for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
			const mbedtls_ecp_curve_info *ci
			    = mbedtls_ecp_curve_info_from_name(defaults[i]);
			if (ci != NULL) {
				out[n++] = ci->grp_id;
			}
		}
		out[n] = MBEDTLS_ECP_DP_NONE;
		return 0;
	}
	while (next_name(&list, tok, sizeof(tok), true, &too_long)) {
		const char *name = tok;
		for (size_t i = 0; i < sizeof(group_alias) / sizeof(group_alias[0]); i++) {
			if (strcmp(tok, group_alias[i].alias) == 0) {
				name = group_alias[i].name;
			}
		}
		const mbedtls_ecp_curve_info *ci = NULL;
		for (const mbedtls_ecp_curve_info *c = mbedtls_ecp_curve_list();
		     !too_long && c->grp_id != MBEDTLS_ECP_DP_NONE; c++) {
			if (strcasecmp(c->name, name) == 0) {
				ci = c;
				break;
			}
		}
		if (ci == NULL) {
			snprintf(err, errlen, "unknown group \"%s\"", tok);
			return NNG_EINVAL;
		}
		bool dup = false;
		for (size_t i = 0; i < n; i++) {
			dup = dup || out[i] == ci->grp_id;
		}
		if (dup) {
			continue;
		}
		if (n == MAX_GROUPS) {
			snprintf(err, errlen, "more than %d groups", MAX_GROUPS);
			return NNG_EINVAL;
		}
		out[n++] = ci->grp_id;
	}
	if (n == 0) {
		snprintf(err, errlen, "no group given");
		return NNG_EINVAL;
	}
	out[n] = MBEDTLS_ECP_DP_NONE;
	return 0;
}

// Appends suite id to out (n entries so far) unless present or unknown.
static void add_suite(int *out, size_t *n, int id)
{
	if (id == 0 || mbedtls_ssl_ciphersuite_from_id(id) == NULL || *n == MAX_SUITES) {
		return;
	}
	for (size_t i = 0; i < *n; i++) {
		if (out[i] == id) {
			return;
		}
	}
	out[(*n)++] = id;
}

// Fills out (0-terminated) from a cipher suite list, or with the
// defaults for NULL/"": the ECDHE AEAD suites in the order the CPU runs
// fastest (AES-GCM or ChaCha20-Poly1305 first), then the rest of mbed
// TLS's own list. Returns 0, or NNG_EINVAL with a message.
static int parse_suites(const char *list, int *out, char *err, size_t errlen)
{
	static const int gcm[] = {
		MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	};
	static const int chacha[] = {
		MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	};
	size_t n = 0;
	char   tok[96];
	bool   too_long;

	if (list == NULL || list[0] == '\0') {
		const int *first  = tls_engine_aes_fast() ? gcm : chacha;
		size_t     nfirst = tls_engine_aes_fast() ? 4 : 2;
		const int *then   = tls_engine_aes_fast() ? chacha : gcm;
		size_t     nthen  = tls_engine_aes_fast() ? 2 : 4;
		for (size_t i = 0; i < nfirst; i++) {
			add_suite(out, &n, first[i]);
		}
		for (size_t i = 0; i < nthen; i++) {
			add_suite(out, &n, then[i]);
		}
		for (const int *id = mbedtls_ssl_list_ciphersuites(); *id != 0; id++) {
			add_suite(out, &n, *id);
		}
		out[n] = 0;
		return 0;
	}
	while (next_name(&list, tok, sizeof(tok), false, &too_long)) {
		for (char *c = tok; *c != '\0'; c++) {
			if (*c == '_') {
				*c = '-';
			}
		}
		int id = too_long ? 0 : mbedtls_ssl_get_ciphersuite_id(tok);
		if (id == 0) {
			snprintf(err, errlen, "unknown cipher suite \"%s\"", tok);
			return NNG_EINVAL;
		}
		add_suite(out, &n, id);
	}
	if (n == 0) {
		snprintf(err, errlen, "no cipher suite given");
		return NNG_EINVAL;
	}
	out[n] = 0;
	return 0;
}

// Checks params; see tls_engine.h.
int tls_engine_params_check(const tls_engine_params *p, char *err, size_t errlen)
{
	mbedtls_ecp_group_id groups[MAX_GROUPS + 1];
	int                  suites[MAX_SUITES + 1];
	int                  rv;
	if (p == NULL) {
		return 0;
	}
	if ((rv = parse_groups(p->groups, groups, err, errlen)) != 0) {
		return rv;
	}
	return parse_suites(p->ciphers, suites, err, errlen);
}

// ---------------------------------------------------------------------------
// Configuration objects

// Prepares a configuration for a server or a client with params p (NULL:
// defaults). A server gets session tickets and a session cache. Returns 0,
// NNG_EINVAL for bad params, or NNG_ENOMEM/NNG_ECRYPTO if mbed TLS cannot
// set up its defaults.
static int cfg_init(tls_cfg *cfg, nng_tls_mode mode, const tls_engine_params *p)
{
	int  endpoint = mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT;
	char err[128];

	cfg->mode = mode;
	cfg->auth
	    = mode == NNG_TLS_MODE_SERVER ? NNG_TLS_AUTH_MODE_NONE : NNG_TLS_AUTH_MODE_REQUIRED;
	mbedtls_ssl_config_init(&cfg->conf);
	mbedtls_x509_crt_init(&cfg->ca);
	mbedtls_x509_crl_init(&cfg->crl);
	mbedtls_ssl_ticket_init(&cfg->ticket);
	mbedtls_ssl_cache_init(&cfg->cache);
	if (mbedtls_ssl_config_defaults(
	        &cfg->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT)
	    != 0) {
		return NNG_ECRYPTO;
	}
	if (parse_groups(p != NULL ? p->groups : NULL, cfg->groups, err, sizeof(err)) != 0
	    || parse_suites(p != NULL ? p->ciphers : NULL, cfg->suites, err, sizeof(err)) != 0) {
		return NNG_EINVAL;
	}
	mbedtls_ssl_conf_curves(&cfg->conf, cfg->groups);
	mbedtls_ssl_conf_ciphersuites(&cfg->conf, cfg->suites);
	mbedtls_ssl_conf_rng(&cfg->conf, rng_random, NULL);
	mbedtls_ssl_conf_authmode(&cfg->conf,
	    mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_VERIFY_NONE : MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_min_version(
	    &cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_max_version(
	    &cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_renegotiation(&cfg->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
	if (mode == NNG_TLS_MODE_SERVER) {
		// Ticket keys come from our generator and stay in memory; mbed
		// TLS makes a new one every lifetime and accepts the previous.
		if (mbedtls_ssl_ticket_setup(&cfg->ticket, rng_random, NULL,
		        MBEDTLS_CIPHER_AES_256_GCM, TLS_ENGINE_TICKET_LIFETIME_S)
		    != 0) {
			mbedtls_ssl_ticket_free(&cfg->ticket);
			mbedtls_ssl_config_free(&cfg->conf);
			return NNG_ECRYPTO;
		}
		mbedtls_ssl_conf_session_tickets_cb(
		    &cfg->conf, mbedtls_ssl_ticket_write, mbedtls_ssl_ticket_parse, &cfg->ticket);
		mbedtls_ssl_cache_set_max_entries(&cfg->cache, TLS_ENGINE_CACHE_ENTRIES);
		mbedtls_ssl_cache_set_timeout(&cfg->cache, TLS_ENGINE_TICKET_LIFETIME_S);
		mbedtls_ssl_conf_session_cache(
		    &cfg->conf, &cfg->cache, mbedtls_ssl_cache_get, mbedtls_ssl_cache_set);
		cfg->resumption = true;
	}
	return 0;
}

// Frees everything a configuration owns; it is not used by any connection
// any more (tls_engine_direct's reference count guarantees it).
static void cfg_fini(tls_cfg *cfg)
{
	own_cert *oc;
	while ((oc = cfg->certs) != NULL) {
		cfg->certs = oc->next;
		mbedtls_x509_crt_free(&oc->crt);
		mbedtls_pk_free(&oc->key);
		free(oc);
	}
	mbedtls_ssl_config_free(&cfg->conf);
	mbedtls_ssl_ticket_free(&cfg->ticket);
	mbedtls_ssl_cache_free(&cfg->cache);
	mbedtls_x509_crt_free(&cfg->ca);
	mbedtls_x509_crl_free(&cfg->crl);
}

// Sets who must prove an identity. For a server, OPTIONAL means "a client
// may send no certificate, but one that it sends must verify"; that last
// part is enforced in handshake_run. Returns 0 or NNG_EINVAL.
static int cfg_auth(tls_cfg *cfg, nng_tls_auth_mode mode)
{
	int m;
	switch (mode) {
	case NNG_TLS_AUTH_MODE_NONE:
		m = MBEDTLS_SSL_VERIFY_NONE;
		break;
	case NNG_TLS_AUTH_MODE_OPTIONAL:
		m = MBEDTLS_SSL_VERIFY_OPTIONAL;
		break;
	case NNG_TLS_AUTH_MODE_REQUIRED:
		m = MBEDTLS_SSL_VERIFY_REQUIRED;
		break;
	default:
		return NNG_EINVAL;
	}
	cfg->auth = mode;
	mbedtls_ssl_conf_authmode(&cfg->conf, m);
	return 0;
}

// Adds the PEM certificates in ca (and the optional PEM CRL) as trust
// anchors. Returns 0, or NNG_EINVAL if nothing usable could be parsed.
// A bundle in which some certificates are not understood is accepted as
// long as one is.
static int cfg_ca_chain(tls_cfg *cfg, const char *ca, const char *crl)
{
	int rv = mbedtls_x509_crt_parse(&cfg->ca, (const unsigned char *)ca, strlen(ca) + 1);
	if (rv < 0 || cfg->ca.version == 0) {
		return NNG_EINVAL;
	}
	cfg->have_ca = true;
	if (crl != NULL) {
		if (mbedtls_x509_crl_parse(&cfg->crl, (const unsigned char *)crl, strlen(crl) + 1)
		    != 0) {
			return NNG_EINVAL;
		}
		cfg->have_crl = true;
	}
	mbedtls_ssl_conf_ca_chain(&cfg->conf, &cfg->ca, cfg->have_crl ? &cfg->crl : NULL);
	return 0;
}

// Adds our own certificate chain and private key (PEM; the key may be
// encrypted with pass). Returns 0; NNG_EINVAL if the certificate or the
// key cannot be parsed or do not belong together; NNG_EPERM if the key
// needs a password that is missing or wrong; NNG_ENOMEM.
static int cfg_own_cert(tls_cfg *cfg, const char *cert, const char *key, const char *pass)
{
	own_cert *oc = calloc(1, sizeof(*oc));
	int       rv;
	if (oc == NULL) {
		return NNG_ENOMEM;
	}
	mbedtls_x509_crt_init(&oc->crt);
	mbedtls_pk_init(&oc->key);
	rv = mbedtls_x509_crt_parse(&oc->crt, (const unsigned char *)cert, strlen(cert) + 1);
	if (rv != 0) {
		rv = NNG_EINVAL;
		goto fail;
	}
	rv = mbedtls_pk_parse_key(&oc->key, (const unsigned char *)key, strlen(key) + 1,
	    (const unsigned char *)pass, pass != NULL ? strlen(pass) : 0);
	if (rv == MBEDTLS_ERR_PK_PASSWORD_REQUIRED || rv == MBEDTLS_ERR_PK_PASSWORD_MISMATCH) {
		rv = NNG_EPERM;
		goto fail;
	}
	if (rv != 0 || mbedtls_pk_check_pair(&oc->crt.pk, &oc->key) != 0) {
		rv = NNG_EINVAL;
		goto fail;
	}
	if (mbedtls_ssl_conf_own_cert(&cfg->conf, &oc->crt, &oc->key) != 0) {
		rv = NNG_ENOMEM;
		goto fail;
	}
	oc->next   = cfg->certs;
	cfg->certs = oc;
	return 0;
fail:
	mbedtls_x509_crt_free(&oc->crt);
	mbedtls_pk_free(&oc->key);
	free(oc);
	return rv;
}

// Copies the first common name of a certificate subject into out, if it is
// a text string type without control characters. Leaves out empty
// otherwise.
static void copy_cn(const mbedtls_x509_name *n, char *out, size_t outlen)
{
	out[0] = '\0';
	for (; n != NULL; n = n->next) {
		if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) != 0) {
			continue;
		}
		if ((n->val.tag != MBEDTLS_ASN1_UTF8_STRING
		        && n->val.tag != MBEDTLS_ASN1_PRINTABLE_STRING
		        && n->val.tag != MBEDTLS_ASN1_IA5_STRING)
		    || n->val.len == 0 || n->val.len >= outlen) {
			return;
		}
		for (size_t i = 0; i < n->val.len; i++) {
			if (n->val.p[i] < 0x20 || n->val.p[i] == 0x7f) {
				return;
			}
		}
		memcpy(out, n->val.p, n->val.len);
		out[n->val.len] = '\0';
		return;
	}
}

// Records what a finished handshake tells about the peer; see
// tls_engine.h.
void tls_engine_record_peer(const mbedtls_ssl_context *ssl, tls_peer *peer)
{
	const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(ssl);
	memset(peer, 0, sizeof(*peer));
	peer->handshake_done = true;
	peer->cert_present   = crt != NULL;
	peer->verified       = crt != NULL && mbedtls_ssl_get_verify_result(ssl) == 0;
	if (crt != NULL) {
		copy_cn(&crt->subject, peer->cn, sizeof(peer->cn));
		if (mbedtls_x509_dn_gets(peer->subject, sizeof(peer->subject), &crt->subject) < 0) {
			peer->subject[0] = '\0';
		}
	}
}

// Certificate check of a client that dialled an IP address (mbed TLS 2.28
// matches the expected name against DNS names and the CN only): the
// server's certificate must hold the address as an iPAddress
// subjectAltName (RFC 6125), as OpenSSL-based clients require.
static int verify_ip(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	const tls_engine_ip *ip = arg;
	if (depth != 0) {
		return 0;
	}
	for (const mbedtls_x509_sequence *n = &crt->subject_alt_names; n != NULL; n = n->next) {
		if (n->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && n->buf.len == ip->len
		    && memcmp(n->buf.p, ip->a, ip->len) == 0) {
			return 0;
		}
	}
	*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	return 0;
}

// Sets the name a client expects; see tls_engine.h.
int tls_engine_client_name(mbedtls_ssl_context *ssl, const char *name, tls_engine_ip *ip)
{
	char   v6[64];
	size_t n;
	memset(ip, 0, sizeof(*ip));
	if (name == NULL) {
		return 0;
	}
	n = strlen(name);
	// "[::1]" is an IPv6 literal too.
	if (n >= 2 && n < sizeof(v6) && name[0] == '[' && name[n - 1] == ']') {
		memcpy(v6, name + 1, n - 2);
		v6[n - 2] = '\0';
		name      = v6;
	}
	if (inet_pton(AF_INET, name, ip->a) == 1) {
		ip->len = 4;
	} else if (inet_pton(AF_INET6, name, ip->a) == 1) {
		ip->len = 16;
	}
	if (ip->len > 0) {
		// No SNI for an address (RFC 6066 3); the name check is
		// verify_ip's.
		mbedtls_ssl_set_verify(ssl, verify_ip, ip);
		return 0;
	}
	return mbedtls_ssl_set_hostname(ssl, name) == 0 ? 0 : NNG_ENOMEM;
}

// The name of a TLS alert (RFC 5246 7.2), or NULL.
static const char *alert_name(int a)
{
	switch (a) {
	case MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE:
		return "handshake failure";
	case MBEDTLS_SSL_ALERT_MSG_BAD_CERT:
		return "bad certificate";
	case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT:
		return "unsupported certificate";
	case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED:
		return "certificate revoked";
	case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED:
		return "certificate expired";
	case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN:
		return "certificate unknown";
	case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA:
		return "unknown CA";
	case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED:
		return "access denied";
	case MBEDTLS_SSL_ALERT_MSG_PROTOCOL_VERSION:
		return "protocol version";
	case MBEDTLS_SSL_ALERT_MSG_INSUFFICIENT_SECURITY:
		return "insufficient security";
	case MBEDTLS_SSL_ALERT_MSG_UNRECOGNIZED_NAME:
		return "unrecognized name";
	case 116: // certificate_required (TLS 1.3)
		return "certificate required";
	default:
		return NULL;
	}
}

// Says why a handshake failed; see tls_engine.h.
void tls_engine_handshake_why(
    const mbedtls_ssl_context *ssl, const tls_engine_ip *ip, int rv, char *why, size_t len)
{
	uint32_t vr = mbedtls_ssl_get_verify_result(ssl);
	if (rv == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED && vr != 0 && vr != (uint32_t)-1) {
		char info[256];
		int  n = mbedtls_x509_crt_verify_info(info, sizeof(info), "", vr);
		for (int i = 0; i < n && info[i] != '\0'; i++) {
			if (info[i] == '\n') {
				info[i] = i + 1 < n && info[i + 1] != '\0' ? ';' : '\0';
			}
		}
		// For an address, a name mismatch is verify_ip's: the CN is not
		// looked at, so mbed TLS's wording would mislead.
		bool by_ip = ip != NULL && ip->len > 0 && (vr & MBEDTLS_X509_BADCERT_CN_MISMATCH);
		snprintf(why, len, "certificate verify failed: %s%s",
		    by_ip ? "no iPAddress subjectAltName matches the address (the CN is not "
		            "checked for addresses); "
		          : "",
		    n > 0 ? info : "unknown");
		return;
	}
	if (rv == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE && ssl->in_msg != NULL) {
		int         a    = ssl->in_msg[1];
		const char *name = alert_name(a);
		snprintf(why, len, "the peer refused the handshake: alert %d (%s)", a,
		    name != NULL ? name : "fatal");
		return;
	}
	if (rv == MBEDTLS_ERR_SSL_CONN_EOF) {
		snprintf(why, len, "peer closed");
	} else if (rv == MBEDTLS_ERR_NET_RECV_FAILED || rv == MBEDTLS_ERR_NET_SEND_FAILED) {
		snprintf(why, len, "socket error");
	} else if (rv == MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE) {
		snprintf(why, len, "no client certificate");
	} else {
		mbedtls_strerror(rv, why, len);
	}
}

// Runs a handshake as far as the socket allows (tls_engine_handshake).
static int handshake_run(
    mbedtls_ssl_context *ssl, const tls_cfg *cfg, bool *checked, tls_peer *peer)
{
	bool optional_server
	    = cfg->mode == NNG_TLS_MODE_SERVER && cfg->auth == NNG_TLS_AUTH_MODE_OPTIONAL;
	while (ssl->state != MBEDTLS_SSL_HANDSHAKE_OVER) {
		int rv = mbedtls_ssl_handshake_step(ssl);
		if (rv != 0) {
			return rv;
		}
		// The client's Certificate message has been processed once the
		// state moves past it. In OPTIONAL mode mbed TLS carries on
		// with a certificate that failed; we refuse it here, before
		// our Finished message.
		if (optional_server && !*checked && ssl->state > MBEDTLS_SSL_CLIENT_CERTIFICATE) {
			// Mid-handshake the certificate is in the session
			// being negotiated (get_peer_cert reads the
			// established session, which does not exist yet).
			const mbedtls_ssl_session *sn = ssl->session_negotiate;
			*checked                      = true;
			if (sn == NULL || (sn->peer_cert != NULL && sn->verify_result != 0)) {
				(void)mbedtls_ssl_send_alert_message(ssl,
				    MBEDTLS_SSL_ALERT_LEVEL_FATAL, MBEDTLS_SSL_ALERT_MSG_BAD_CERT);
				return MBEDTLS_ERR_X509_CERT_VERIFY_FAILED;
			}
		}
	}
	tls_engine_record_peer(ssl, peer);
	return 0;
}

// Seeds the generator; run once.
static void rng_setup(void)
{
	static const char pers[] = "nanomq-tls";
	mbedtls_entropy_init(&rng_entropy);
	mbedtls_ctr_drbg_init(&rng_drbg);
	rng_rv = mbedtls_ctr_drbg_seed(&rng_drbg, mbedtls_entropy_func, &rng_entropy,
	             (const unsigned char *)pers, sizeof(pers) - 1)
	        == 0
	    ? 0
	    : NNG_ECRYPTO;
}

// ---------------------------------------------------------------------------
// Configurations, reference counted; see tls_engine.h.

struct tls_engine_direct {
	tls_cfg    cfg;
	atomic_int refs;
};

int tls_engine_direct_alloc(tls_engine_direct **dp, nng_tls_mode mode, const tls_engine_params *p)
{
	char               err[128];
	tls_engine_direct *d;
	int                rv;
	if (tls_engine_params_check(p, err, sizeof(err)) != 0) {
		return NNG_EINVAL;
	}
	pthread_once(&rng_once, rng_setup);
	if (rng_rv != 0) {
		return rng_rv;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL) {
		return NNG_ENOMEM;
	}
	rv = cfg_init(&d->cfg, mode, p);
	if (rv != 0) {
		cfg_fini(&d->cfg); // mbed TLS's free functions may run twice
		free(d);
		return rv;
	}
	atomic_init(&d->refs, 1);
	*dp = d;
	return 0;
}

void tls_engine_direct_hold(tls_engine_direct *d)
{
	atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
}

int tls_engine_direct_own_cert(
    tls_engine_direct *d, const char *cert, const char *key, const char *pass)
{
	return cfg_own_cert(&d->cfg, cert, key, pass);
}

int tls_engine_direct_ca_chain(tls_engine_direct *d, const char *ca)
{
	return cfg_ca_chain(&d->cfg, ca, NULL);
}

int tls_engine_direct_auth_mode(tls_engine_direct *d, nng_tls_auth_mode mode)
{
	return cfg_auth(&d->cfg, mode);
}

const struct mbedtls_ssl_config *tls_engine_direct_conf(const tls_engine_direct *d)
{
	return &d->cfg.conf;
}

void tls_engine_direct_free(tls_engine_direct *d)
{
	if (d != NULL && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
		cfg_fini(&d->cfg);
		free(d);
	}
}

// Runs a handshake on a direct configuration; see tls_engine.h.
int tls_engine_handshake(
    mbedtls_ssl_context *ssl, const tls_engine_direct *d, bool *checked, tls_peer *peer)
{
	return handshake_run(ssl, &d->cfg, checked, peer);
}
