// `nanomq passwd`: edits one user of a HOCON password file (see
// auth_passwd.h).
#include "src/auth/auth_passwd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <mbedtls/platform_util.h>

#include "src/auth/password.h"

// A growable output buffer.
typedef struct outbuf {
	char  *p;
	size_t len;
	size_t cap;
	bool   failed; // memory ran out
} outbuf;

// Appends n bytes to o; on failure sets o->failed.
static void out_add(outbuf *o, const void *s, size_t n)
{
	if (o->failed) {
		return;
	}
	if (o->len + n > o->cap) {
		size_t cap = o->cap > 0 ? o->cap : 256;
		while (cap < o->len + n) {
			cap *= 2;
		}
		char *np = realloc(o->p, cap);
		if (np == NULL) {
			o->failed = true;
			return;
		}
		o->p   = np;
		o->cap = cap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

// Prints the usage text to f.
static void usage(FILE *f)
{
	fprintf(f,
	    "Usage: nanomq passwd [-c] <file> <user>\n"
	    "       nanomq passwd [-c] -b <file> <user> <password>\n"
	    "       nanomq passwd -D <file> <user>\n"
	    " -b  batch mode: the password is the last argument\n"
	    " -c  create the file, replacing an existing one\n"
	    " -D  delete the user\n"
	    "Entries are written as $7$ (PBKDF2-SHA512, %d iterations), the format of\n"
	    "Mosquitto 2.x mosquitto_passwd.\n",
	    AUTH_PBKDF2_ITERATIONS);
}

// Returns true when the user name can be stored: 1 to 65535 bytes with no
// control characters.
static bool user_ok(const char *u)
{
	size_t n = strlen(u);

	if (n == 0 || n > AUTH_MAX_FIELD_LEN) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)u[i];
		if (c < 0x20 || c == 0x7f) {
			return false;
		}
	}
	return true;
}

// Returns true for a byte that may appear in an unquoted HOCON key.
static bool key_char(const char *p, const char *end)
{
	unsigned char c = (unsigned char)*p;

	if (c <= 0x20 || c == 0x7f || strchr("=:{}[],.\"#", c) != NULL) {
		return false;
	}
	return !(c == '/' && p + 1 < end && p[1] == '/');
}

// Reads 4 hex digits at p. Returns the value, or -1.
static long hex4(const char *p, const char *end)
{
	long v = 0;

	if (end - p < 4) {
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)p[i];
		int d;
		if (c >= '0' && c <= '9') {
			d = c - '0';
		} else if (c >= 'a' && c <= 'f') {
			d = c - 'a' + 10;
		} else if (c >= 'A' && c <= 'F') {
			d = c - 'A' + 10;
		} else {
			return -1;
		}
		v = v * 16 + d;
	}
	return v;
}

// Appends the UTF-8 encoding of code point cp to o.
static void out_utf8(outbuf *o, unsigned long cp)
{
	unsigned char b[4];
	size_t        n;

	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n    = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n    = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n    = 3;
	} else {
		b[0] = (unsigned char)(0xf0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n    = 4;
	}
	out_add(o, b, n);
}

// Decodes the quoted key starting at *pp (on the opening quote) into key.
// Returns 0 and moves *pp past the closing quote, or -1 when the quoted
// text is not a valid JSON string on this line.
static int quoted_key(const char **pp, const char *end, outbuf *key)
{
	const char *p = *pp + 1;

	while (p < end && *p != '"') {
		if (*p != '\\') {
			out_add(key, p++, 1);
			continue;
		}
		if (++p >= end) {
			return -1;
		}
		const char *simple = strchr("\"\\/bfnrt", *p);
		if (simple != NULL && *p != '\0') {
			static const char decoded[] = "\"\\/\b\f\n\r\t";
			out_add(key, &decoded[simple - "\"\\/bfnrt"], 1);
			p++;
			continue;
		}
		if (*p != 'u') {
			return -1;
		}
		long cp = hex4(p + 1, end);
		if (cp < 0) {
			return -1;
		}
		p += 5;
		if (cp >= 0xd800 && cp <= 0xdbff) {
			long lo;
			if (end - p < 6 || p[0] != '\\' || p[1] != 'u'
			    || (lo = hex4(p + 2, end)) < 0xdc00 || lo > 0xdfff) {
				return -1;
			}
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			p += 6;
		} else if (cp >= 0xdc00 && cp <= 0xdfff) {
			return -1;
		}
		out_utf8(key, (unsigned long)cp);
	}
	if (p >= end) {
		return -1;
	}
	*pp = p + 1;
	return 0;
}

// Returns true when the line [p, end) assigns a value to the single-level
// key user (written bare or quoted, followed by ':' or '=').
static bool line_is_user(const char *p, const char *end, const char *user)
{
	outbuf key = { 0 };
	bool   rv  = false;

	while (p < end && (*p == ' ' || *p == '\t')) {
		p++;
	}
	if (p < end && *p == '"') {
		if (quoted_key(&p, end, &key) != 0) {
			goto out;
		}
	} else {
		const char *s = p;
		while (p < end && key_char(p, end)) {
			p++;
		}
		if (p == s) {
			goto out;
		}
		out_add(&key, s, (size_t)(p - s));
	}
	while (p < end && (*p == ' ' || *p == '\t')) {
		p++;
	}
	if (p >= end || (*p != ':' && *p != '=') || key.failed) {
		goto out;
	}
	rv = key.len == strlen(user) && memcmp(key.p, user, key.len) == 0;
out:
	free(key.p);
	return rv;
}

// Appends the line `<user>: "<entry>"` to o, quoting the user name unless
// it is a plain word.
static void out_entry(outbuf *o, const char *user, const char *entry)
{
	bool plain = strcmp(user, "include") != 0;

	for (const char *p = user; *p != '\0' && plain; p++) {
		plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
		    || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-';
	}
	if (plain) {
		out_add(o, user, strlen(user));
	} else {
		out_add(o, "\"", 1);
		for (const char *p = user; *p != '\0'; p++) {
			if (*p == '"' || *p == '\\') {
				out_add(o, "\\", 1);
			}
			out_add(o, p, 1);
		}
		out_add(o, "\"", 1);
	}
	out_add(o, ": \"", 3);
	out_add(o, entry, strlen(entry));
	out_add(o, "\"\n", 2);
}

// Reads the whole file at path into *buf / *len and its mode into *mode.
// Returns 0, or -1 after printing why.
static int read_file(const char *path, char **buf, size_t *len, mode_t *mode)
{
	int         fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t      got = 0;

	if (fd < 0) {
		fprintf(
		    stderr, "nanomq passwd: %s: %s (use -c to create it)\n", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "nanomq passwd: %s: not a regular file\n", path);
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size > AUTH_PASSWD_MAX_FILE) {
		fprintf(stderr, "nanomq passwd: %s: larger than %u bytes\n", path,
		    AUTH_PASSWD_MAX_FILE);
		close(fd);
		return -1;
	}
	if ((*buf = malloc((size_t)st.st_size + 1)) == NULL) {
		fprintf(stderr, "nanomq passwd: out of memory\n");
		close(fd);
		return -1;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			break; // a file that shrank is taken as it is now
		}
		got += (size_t)r;
	}
	close(fd);
	*len  = got;
	*mode = st.st_mode & 07777;
	return 0;
}

// Writes data to path through a temporary file and rename(2). Returns 0,
// or -1 after printing why.
static int write_file(const char *path, const char *data, size_t len, mode_t mode)
{
	size_t plen = strlen(path);
	char  *tmp  = malloc(plen + 8);
	int    fd;
	size_t off = 0;

	if (tmp == NULL) {
		fprintf(stderr, "nanomq passwd: out of memory\n");
		return -1;
	}
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".XXXXXX", 8);
	if ((fd = mkstemp(tmp)) < 0) {
		fprintf(stderr, "nanomq passwd: %s: %s\n", tmp, strerror(errno));
		free(tmp);
		return -1;
	}
	if (fchmod(fd, mode) != 0) {
		goto fail;
	}
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			goto fail;
		}
		off += (size_t)w;
	}
	if (fsync(fd) != 0) {
		goto fail;
	}
	if (close(fd) != 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) != 0) {
		goto fail;
	}
	free(tmp);
	return 0;

fail:
	fprintf(stderr, "nanomq passwd: %s: %s\n", path, strerror(errno));
	if (fd >= 0) {
		close(fd);
	}
	unlink(tmp);
	free(tmp);
	return -1;
}

// Reads one line from the terminal fd without echo into buf (cap bytes,
// NUL-terminated, newline removed). Returns its length, or -1 on a read
// error, end of file, or a line longer than cap - 1.
static long tty_line(int fd, const char *prompt, char *buf, size_t cap)
{
	struct termios old;
	struct termios quiet;
	bool           restore = false;
	size_t         n       = 0;
	long           rv      = -1;

	if (tcgetattr(fd, &old) == 0) {
		quiet = old;
		quiet.c_lflag &= (tcflag_t)~ECHO;
		restore = tcsetattr(fd, TCSAFLUSH, &quiet) == 0;
	}
	(void)!write(fd, prompt, strlen(prompt));
	for (;;) {
		char    c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			break;
		}
		if (c == '\n') {
			buf[n] = '\0';
			rv     = (long)n;
			break;
		}
		if (n + 1 >= cap) {
			break;
		}
		buf[n++] = c;
	}
	if (restore) {
		(void)tcsetattr(fd, TCSAFLUSH, &old);
	}
	(void)!write(fd, "\n", 1);
	if (n > 0 && rv > 0 && buf[n - 1] == '\r') {
		buf[--n] = '\0';
		rv--;
	}
	return rv;
}

// Asks for the password twice on the terminal into buf. Returns its
// length, or -1 after printing why.
static long ask_password(char *buf, size_t cap)
{
	char again[AUTH_PASSWD_MAX_TTY];
	int  fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	long n;
	long m;

	if (fd < 0) {
		fprintf(stderr, "nanomq passwd: no terminal to read the password from; use -b\n");
		return -1;
	}
	n = tty_line(fd, "Password: ", buf, cap);
	m = n >= 0 ? tty_line(fd, "Reenter password: ", again, sizeof(again)) : -1;
	close(fd);
	if (n < 0 || m < 0) {
		fprintf(stderr, "nanomq passwd: could not read the password (at most %d bytes)\n",
		    AUTH_PASSWD_MAX_TTY - 1);
		n = -1;
	} else if (n != m || memcmp(buf, again, (size_t)n) != 0) {
		fprintf(stderr, "nanomq passwd: the passwords do not match\n");
		n = -1;
	}
	mbedtls_platform_zeroize(again, sizeof(again));
	return n;
}

// Runs `nanomq passwd`. Returns the exit status.
int auth_passwd_main(int argc, char **argv)
{
	bool        batch  = false;
	bool        create = false;
	bool        del    = false;
	const char *pos[4];
	int         npos = 0;
	bool        opts = true;
	char        tty_pw[AUTH_PASSWD_MAX_TTY];
	const char *pw   = NULL;
	size_t      plen = 0;
	char        entry[AUTH_PBKDF2_ENTRY_MAX];
	char       *data  = NULL;
	size_t      dlen  = 0;
	mode_t      mode  = 0600;
	outbuf      out   = { 0 };
	bool        found = false;
	int         rv    = 1;
	char        real[PATH_MAX];
	const char *path;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (opts && strcmp(a, "--") == 0) {
			opts = false;
		} else if (opts && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			usage(stdout);
			return 0;
		} else if (opts && a[0] == '-' && a[1] != '\0') {
			for (const char *f = a + 1; *f != '\0'; f++) {
				if (*f == 'b') {
					batch = true;
				} else if (*f == 'c') {
					create = true;
				} else if (*f == 'D') {
					del = true;
				} else {
					fprintf(stderr, "nanomq passwd: unknown option -%c\n", *f);
					usage(stderr);
					return 1;
				}
			}
		} else if (npos < 4) {
			pos[npos++] = a;
		} else {
			npos++;
		}
	}
	if ((create && del) || (del && batch) || npos != (batch ? 3 : 2)) {
		usage(stderr);
		return 1;
	}
	if (!user_ok(pos[1])) {
		fprintf(stderr,
		    "nanomq passwd: the user name must be 1 to 65535 bytes without "
		    "control characters\n");
		return 1;
	}
	path = pos[0];
	if (!create && realpath(pos[0], real) != NULL) {
		path = real; // edit the target of a symbolic link, not the link
	}
	if (!create && read_file(path, &data, &dlen, &mode) != 0) {
		return 1;
	}
	if (!del) {
		long n;
		if (batch) {
			pw   = pos[2];
			plen = strlen(pw);
		} else if ((n = ask_password(tty_pw, sizeof(tty_pw))) >= 0) {
			pw   = tty_pw;
			plen = (size_t)n;
		} else {
			goto done;
		}
		if (plen > AUTH_MAX_FIELD_LEN) {
			fprintf(stderr, "nanomq passwd: the password is longer than 65535 bytes\n");
			goto done;
		}
		nmq_err e = auth_password_hash_new(pw, plen, entry, sizeof(entry));
		if (e != NMQ_OK) {
			fprintf(stderr, "nanomq passwd: cannot compute the hash: %s\n",
			    nmq_strerror(e));
			goto done;
		}
	}
	for (size_t p = 0; p < dlen;) {
		const char *nl  = memchr(data + p, '\n', dlen - p);
		size_t      end = nl != NULL ? (size_t)(nl - data) : dlen;
		size_t      nxt = nl != NULL ? end + 1 : dlen;
		if (line_is_user(data + p, data + end, pos[1])) {
			if (!found && !del) {
				out_entry(&out, pos[1], entry);
			}
			found = true;
		} else {
			out_add(&out, data + p, nxt - p);
		}
		p = nxt;
	}
	if (!found) {
		if (del) {
			fprintf(stderr, "nanomq passwd: user not found\n");
			goto done;
		}
		if (out.len > 0 && out.p[out.len - 1] != '\n') {
			out_add(&out, "\n", 1);
		}
		out_entry(&out, pos[1], entry);
	}
	if (out.failed) {
		fprintf(stderr, "nanomq passwd: out of memory\n");
		goto done;
	}
	if (write_file(path, out.p != NULL ? out.p : "", out.len, mode) == 0) {
		rv = 0;
	}

done:
	mbedtls_platform_zeroize(tty_pw, sizeof(tty_pw));
	free(data);
	free(out.p);
	return rv;
}
