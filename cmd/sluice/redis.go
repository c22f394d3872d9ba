package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// connFlags are the command line's flags that say how to reach Redis.
type connFlags struct {
	redis        string // -redis: a URL, or host:port[,host:port...]
	user         string
	passwordEnv  string
	passwordFile string
	db           int
	tls          bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	tlsServer    string
	tlsInsecure  bool
	cluster      bool
	master       string
	sentinelEnv  string
}

// define registers the flags on fs, with the -redis default addr.
func (c *connFlags) define(fs *flag.FlagSet, addr string) {
	fs.StringVar(&c.redis, "redis", addr, "Redis `address`: host:port; several, comma-separated, with -cluster or -sentinel-master;\n"+
		"or a URL, redis://[user[:password]@]host[:port][/db] or rediss:// for TLS")
	// The default shown by -help must not show a password from $REDIS_ADDR.
	fs.Lookup("redis").DefValue = redactURL(addr)
	fs.StringVar(&c.user, "user", "", "Redis ACL `user` name (or the URL's user)")
	fs.StringVar(&c.passwordEnv, "password-env", "", "read the Redis password from the environment `variable` named")
	fs.StringVar(&c.passwordFile, "password-file", "", "read the Redis password from the first line of `file`")
	fs.IntVar(&c.db, "db", -1, "Redis database `number` (default 0, or the URL's)")
	fs.Lookup("db").DefValue = "0" // -1 means not given
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS (implied by rediss:// and the other -tls flags)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM `file` of the certificate authorities to trust (default: the system's)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `file` of the client certificate, with -tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `file` of the client certificate's key, with -tls-cert")
	fs.StringVar(&c.tlsServer, "tls-server-name", "", "the `name` the server's certificate must carry (default: the host of -redis)")
	fs.BoolVar(&c.tlsInsecure, "tls-insecure-skip-verify", false, "do not verify the server's certificate (for tests only)")
	fs.BoolVar(&c.cluster, "cluster", false, "-redis names Redis Cluster nodes (one is enough)")
	fs.StringVar(&c.master, "sentinel-master", "", "-redis names Sentinels, which serve the master of this `name`")
	fs.StringVar(&c.sentinelEnv, "sentinel-password-env", "", "read the Sentinels' own password from the environment `variable` named")
}

// options returns the client options the flags describe, and the secrets
// they hold (passwords), which must never be printed. getenv reads the
// environment. Errors never contain a secret.
func (c *connFlags) options(getenv func(string) string) (*redis.UniversalOptions, []string, error) {
	var secrets []string
	o := &redis.UniversalOptions{
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // one attempt: the command's -timeout bounds it
		DialerRetries:         1,  // a refused connection is reported as such, at once
		DisableIdentity:       true,
	}
	var urlTLS bool
	var host string // the first address's host, for TLS
	switch {
	case strings.Contains(c.redis, "://"):
		secrets = append(secrets, urlSecrets(c.redis)...)
		u, err := parseURL(c.redis)
		if err != nil {
			return nil, secrets, err
		}
		o.Addrs = []string{u.Addr}
		o.Username, o.Password, o.DB = u.Username, u.Password, u.DB
		urlTLS = u.TLSConfig != nil
		host, _, _ = net.SplitHostPort(u.Addr)
	default:
		for _, a := range strings.Split(c.redis, ",") {
			a = strings.TrimSpace(a)
			h, p, err := net.SplitHostPort(a)
			if err != nil || h == "" || p == "" {
				return nil, secrets, fmt.Errorf("-redis: %q is not host:port or a redis:// URL", a)
			}
			if host == "" {
				host = h
			}
			o.Addrs = append(o.Addrs, a)
		}
	}
	switch {
	case c.cluster && c.master != "":
		return nil, secrets, errors.New("-cluster and -sentinel-master: choose one")
	case len(o.Addrs) > 1 && !c.cluster && c.master == "":
		return nil, secrets, fmt.Errorf("-redis names %d addresses: say whether they are Cluster nodes (-cluster) or Sentinels (-sentinel-master)", len(o.Addrs))
	}
	o.IsClusterMode = c.cluster
	o.MasterName = c.master
	if c.user != "" {
		if o.Username != "" && o.Username != c.user {
			return nil, secrets, errors.New("-user and the URL name different users: give one")
		}
		o.Username = c.user
	}
	pw, given, err := readSecret("password", c.passwordEnv, c.passwordFile, getenv)
	if pw != "" {
		secrets = append(secrets, pw)
	}
	if err != nil {
		return nil, secrets, err
	}
	if given {
		if o.Password != "" {
			return nil, secrets, errors.New("the password is given twice: in the URL and by -password-env or -password-file")
		}
		o.Password = pw
	}
	if c.sentinelEnv != "" {
		if c.master == "" {
			return nil, secrets, errors.New("-sentinel-password-env needs -sentinel-master")
		}
		spw, _, err := readSecret("sentinel-password", c.sentinelEnv, "", getenv)
		if spw != "" {
			secrets = append(secrets, spw)
		}
		if err != nil {
			return nil, secrets, err
		}
		o.SentinelPassword = spw
	}
	if c.db >= 0 {
		if c.cluster && c.db != 0 {
			return nil, secrets, errors.New("-db: a Redis Cluster has database 0 only")
		}
		o.DB = c.db
	}
	if c.tls || urlTLS || c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != "" || c.tlsServer != "" || c.tlsInsecure {
		cfg, err := c.tlsConfig(host)
		if err != nil {
			return nil, secrets, err
		}
		o.TLSConfig = cfg
	}
	return o, secrets, nil
}

// parseURL reads a redis:// or rediss:// URL. Its errors never contain the
// URL's password, nor any part of it.
func parseURL(s string) (*redis.Options, error) {
	shown := redactURL(s)
	if _, err := url.Parse(s); err != nil {
		// url's errors quote the text they could not read, which may be
		// the password: say what is wrong with the rest, or only where.
		if _, rerr := url.Parse(stripUserinfo(s)); rerr != nil {
			var uerr *url.Error
			if errors.As(rerr, &uerr) {
				rerr = uerr.Err
			}
			return nil, fmt.Errorf("-redis: %s is not a valid URL: %v", shown, rerr)
		}
		return nil, fmt.Errorf("-redis: %s is not a valid URL: its user or password is not URL text (write reserved characters as %%XX)", shown)
	}
	u, _ := url.Parse(s)
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("-redis: %s: the scheme is %q, want redis or rediss", shown, u.Scheme)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("-redis: %s: URL parameters are not read; use the flags", shown)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("-redis: %s: port %s, want 1 to 65535", shown, p)
		}
	}
	o, err := redis.ParseURL(s)
	if err != nil {
		// go-redis's errors name the path, the scheme or a parameter,
		// never the user part; redact anyway.
		return nil, fmt.Errorf("-redis: %s: %s", shown, redactText(err.Error(), urlSecrets(s)))
	}
	return o, nil
}

// userinfo returns the bounds of s's user part (between "://" and the last
// '@' of the authority), or -1, -1 without one. It reads what url.Parse
// may not, so that a password is found even in a URL that does not parse.
func userinfo(s string) (int, int) {
	i := strings.Index(s, "://")
	if i < 0 {
		return -1, -1
	}
	start := i + 3
	end := len(s)
	if j := strings.IndexAny(s[start:], "/?#"); j >= 0 {
		end = start + j
	}
	at := strings.LastIndexByte(s[start:end], '@')
	if at < 0 {
		return -1, -1
	}
	return start, start + at
}

// urlSecrets returns the password of URL s as written and unescaped; nil
// without one.
func urlSecrets(s string) []string {
	start, end := userinfo(s)
	if start < 0 {
		return nil
	}
	_, pw, ok := strings.Cut(s[start:end], ":")
	if !ok || pw == "" {
		return nil
	}
	out := []string{pw}
	if u, err := url.PathUnescape(pw); err == nil && u != pw && u != "" {
		out = append(out, u)
	}
	return out
}

// redactURL returns s with the password of its user part replaced by
// "xxxxx"; s unchanged when it has none.
func redactURL(s string) string {
	start, end := userinfo(s)
	if start < 0 {
		return s
	}
	user, _, ok := strings.Cut(s[start:end], ":")
	if !ok {
		return s
	}
	return s[:start] + user + ":xxxxx" + s[end:]
}

// stripUserinfo returns s without its user part.
func stripUserinfo(s string) string {
	start, end := userinfo(s)
	if start < 0 {
		return s
	}
	return s[:start] + s[end+1:]
}

// readSecret reads the secret named what from the environment variable env
// or the file path (at most one of them), and says whether one was given.
func readSecret(what, env, path string, getenv func(string) string) (string, bool, error) {
	switch {
	case env != "" && path != "":
		return "", false, fmt.Errorf("-%s-env and -%s-file: give one", what, what)
	case env != "":
		v := getenv(env)
		if v == "" {
			return "", false, fmt.Errorf("-%s-env: the environment variable %s is empty or unset", what, env)
		}
		return v, true, nil
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			// The error names the file, not its content.
			return "", false, fmt.Errorf("-%s-file: %w", what, err)
		}
		line, _, _ := bytes.Cut(b, []byte{'\n'})
		v := strings.TrimRight(string(line), "\r")
		if v == "" {
			return "", false, fmt.Errorf("-%s-file: %s has an empty first line", what, path)
		}
		return v, true, nil
	}
	return "", false, nil
}

// tlsConfig returns the TLS configuration of the flags, for a server whose
// host is host.
func (c *connFlags) tlsConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, InsecureSkipVerify: c.tlsInsecure}
	if c.tlsServer != "" {
		cfg.ServerName = c.tlsServer
	}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca: %s holds no PEM certificate", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return nil, errors.New("-tls-cert and -tls-key go together: give both or neither")
	case c.tlsCert != "":
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert, -tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// redactText returns s with every secret replaced by "xxxxx".
func redactText(s string, secrets []string) string {
	for _, v := range secrets {
		if v != "" {
			s = strings.ReplaceAll(s, v, "xxxxx")
		}
	}
	return s
}

// redactor is a Writer that writes through to w with the secrets replaced,
// so that no message, whatever it quotes, prints a password. The command
// writes whole lines, so a secret is never split between two writes.
type redactor struct {
	w       io.Writer
	secrets *[]string
}

func (r redactor) Write(p []byte) (int, error) {
	if len(*r.secrets) == 0 {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, redactText(string(p), *r.secrets)); err != nil {
		return 0, err
	}
	return len(p), nil
}
