package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// secret is the password of the test servers; no output may contain it.
const secret = "s3cret-Pa55word"

// env is an environment for runEnv.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// sluiceEnv runs the command with args and environment e, and fails the
// test if the password appears in its output.
func sluiceEnv(t *testing.T, e env, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runEnv(context.Background(), append([]string{"-prefix", "clitest:", "-timeout", "5s"}, args...), e.get, &out, &errOut)
	for _, s := range []string{out.String(), errOut.String()} {
		if strings.Contains(s, secret) || strings.Contains(s, "s3cret") {
			t.Errorf("sluice %q printed the password:\n%s", args, s)
		}
	}
	return code, out.String(), errOut.String()
}

type step struct {
	name    string
	env     env
	args    []string
	code    int
	errText string // a substring of standard error
}

func runSteps(t *testing.T, steps []step) {
	t.Helper()
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, out, errOut := sluiceEnv(t, st.env, st.args...)
			if code != st.code || !strings.Contains(errOut, st.errText) {
				t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d and %q", st.args, code, out, errOut, st.code, st.errText)
			}
		})
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", secret)
	addr := srv.Addr()
	pwFile := writeFile(t, "pw", secret+"\n")
	emptyFile := writeFile(t, "empty", "\n")
	withPW := env{"REDIS_PASSWORD": secret}
	url := "redis://:" + secret + "@" + addr
	_, port, _ := net.SplitHostPort(addr)
	runSteps(t, []step{
		{"env", withPW, []string{"-redis", addr, "-password-env", "REDIS_PASSWORD", "allow", "plans", "tenant:a"}, 0, ""},
		{"file", nil, []string{"-redis", addr, "-password-file", pwFile, "allow", "plans", "tenant:b"}, 0, ""},
		{"url", nil, []string{"-redis", url, "override", "list", "plans"}, 0, ""},
		{"url from REDIS_ADDR", env{"REDIS_ADDR": url + "/0"}, []string{"override", "list", "plans"}, 0, ""},
		{"url with db", nil, []string{"-redis", url + "/3", "override", "list", "plans"}, 0, ""},

		// Failures: none prints the password (checked by sluiceEnv).
		{"no password", nil, []string{"-redis", addr, "override", "list", "plans"}, 1, "NOAUTH"},
		{"wrong password", env{"P": "wrong"}, []string{"-redis", addr, "-password-env", "P", "override", "list", "plans"}, 1, "WRONGPASS"},
		{"unset variable", nil, []string{"-redis", addr, "-password-env", "P", "override", "list", "plans"}, 2, "environment variable P is empty or unset"},
		{"missing file", nil, []string{"-redis", addr, "-password-file", pwFile + ".nope", "override", "list", "plans"}, 2, "-password-file"},
		{"empty file", nil, []string{"-redis", addr, "-password-file", emptyFile, "override", "list", "plans"}, 2, "empty first line"},
		{"env and file", withPW, []string{"-redis", addr, "-password-env", "REDIS_PASSWORD", "-password-file", pwFile, "override", "list", "plans"}, 2, "give one"},
		{"twice", withPW, []string{"-redis", url, "-password-env", "REDIS_PASSWORD", "override", "list", "plans"}, 2, "given twice"},
		{"refused", nil, []string{"-redis", "redis://:" + secret + "@127.0.0.1:1", "override", "list", "plans"}, 1, "store unavailable"},
		{"bad port", nil, []string{"-redis", "redis://:" + secret + "@127.0.0.1:99999", "override", "list", "plans"}, 2, "redis://:xxxxx@127.0.0.1:99999"},
		{"bad scheme", nil, []string{"-redis", "http://u:" + secret + "@" + addr, "override", "list", "plans"}, 2, `the scheme is "http"`},
		{"bad escape in password", nil, []string{"-redis", "redis://:" + secret + "%zz@" + addr, "override", "list", "plans"}, 2, "user or password is not URL text"},
		{"bad path", nil, []string{"-redis", url + "/x/y", "override", "list", "plans"}, 2, "invalid URL path"},
		{"bad db", nil, []string{"-redis", url + "/x", "override", "list", "plans"}, 2, "invalid database number"},
		{"parameters", nil, []string{"-redis", url + "?dial_timeout=1", "override", "list", "plans"}, 2, "URL parameters are not read"},
		{"bad command", withPW, []string{"-redis", url, "frob"}, 2, `unknown command "frob"`},
		{"bad flag", env{"REDIS_ADDR": url}, []string{"-nope"}, 2, "redis://:xxxxx@127.0.0.1:" + port},
		{"timeout", nil, []string{"-redis", url, "-timeout", "1ns", "override", "list", "plans"}, 1, ""},
		{"TLS to a plain port", nil, []string{"-redis", "rediss://:" + secret + "@" + addr, "-timeout", "300ms", "override", "list", "plans"}, 1, "no answer from Redis within -timeout 300ms"},
	})
	// A bare "s3cret" as the password must be redacted wherever it
	// appears, here in the unknown command it also names.
	t.Run("redacted everywhere", func(t *testing.T) {
		code, _, errOut := sluiceEnv(t, env{"P": "s3cret"}, "-redis", addr, "-password-env", "P", "s3cret")
		if code != 2 || !strings.Contains(errOut, `unknown command "xxxxx"`) {
			t.Errorf("= %d, %q; want 2 and the command redacted", code, errOut)
		}
	})
}

func TestACLUser(t *testing.T) {
	// The tool's least privilege (docs/production.md): only these
	// commands, only keys under the prefix. A missing command fails the
	// test with NOPERM.
	srv := redistest.Start(t,
		"--user", "default", "off",
		"--user", "operator", "on", ">"+secret, "~clitest:*", "resetchannels", "-@all",
		"+evalsha", "+eval", "+get", "+set", "+hexists", "+hlen", "+hset", "+hdel", "+hgetall", "+incr")
	addr := srv.Addr()
	e := env{"PW": secret}
	runSteps(t, []step{
		{"set", e, []string{"-redis", addr, "-user", "operator", "-password-env", "PW", "override", "set", "plans", "tenant:acme", "10/s"}, 0, ""},
		{"deny", e, []string{"-redis", addr, "-user", "operator", "-password-env", "PW", "deny", "plans", "203.0.113.0/24"}, 0, ""},
		{"list", e, []string{"-redis", "redis://operator@" + addr, "-password-env", "PW", "override", "list", "plans"}, 0, ""},
		{"rm", e, []string{"-redis", "redis://operator:" + secret + "@" + addr, "override", "rm", "plans", "tenant:acme"}, 0, ""},
		{"wrong user", e, []string{"-redis", addr, "-user", "nobody", "-password-env", "PW", "override", "list", "plans"}, 1, "WRONGPASS"},
		{"two users", e, []string{"-redis", "redis://operator@" + addr, "-user", "other", "-password-env", "PW", "override", "list", "plans"}, 2, "different users"},
		{"other prefix", e, []string{"-redis", addr, "-user", "operator", "-password-env", "PW", "-prefix", "other:", "override", "list", "plans"}, 1, "NOPERM"},
	})
}

// testPKI is a throwaway certificate authority and the certificates it
// signed, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey, otherCA string
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyFile := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "PRIVATE KEY", der)
	}
	serial := int64(1)
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
		k := key()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, k, write(name+".pem", "CERTIFICATE", der)
	}
	ca, caKey, caFile := newCA("ca")
	_, _, otherFile := newCA("other")
	leaf := func(name string, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"redis.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), keyFile(name+"-key.pem", k)
	}
	p := testPKI{ca: caFile, otherCA: otherFile}
	p.serverCert, p.serverKey = leaf("server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", x509.ExtKeyUsageClientAuth)
	return p
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestTLS(t *testing.T) {
	pki := newPKI(t)
	port := freePort(t)
	// The plain port stays open for redistest's readiness probe (which
	// meets requirepass and takes the NOAUTH as ready); the tool uses the
	// TLS port, which wants a client certificate.
	redistest.Start(t, "--requirepass", secret, "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
		"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	e := env{"PW": secret}
	auth := []string{"-redis", tlsAddr, "-password-env", "PW"}
	client := []string{"-tls-cert", pki.clientCert, "-tls-key", pki.clientKey}
	with := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return append(out, "override", "list", "plans")
	}
	runSteps(t, []step{
		{"ca and client certificate", e, with(auth, client, []string{"-tls-ca", pki.ca}), 0, ""},
		{"server name", e, with(auth, client, []string{"-tls-ca", pki.ca, "-tls-server-name", "redis.test"}), 0, ""},
		{"rediss URL", e, with([]string{"-redis", "rediss://:" + secret + "@" + tlsAddr}, client, []string{"-tls-ca", pki.ca}), 0, ""},
		{"insecure", e, with(auth, client, []string{"-tls-insecure-skip-verify"}), 0, ""},

		{"unknown authority", e, with(auth, client, []string{"-tls-ca", pki.otherCA}), 1, "certificate"},
		{"system authorities", e, with(auth, client, []string{"-tls"}), 1, "certificate"},
		{"wrong server name", e, with(auth, client, []string{"-tls-ca", pki.ca, "-tls-server-name", "other.test"}), 1, "certificate"},
		{"no client certificate", e, with(auth, []string{"-tls-ca", pki.ca}), 1, "store unavailable"},
		{"plain text to the TLS port", e, with(auth), 1, "store unavailable"},
		{"cert without key", e, with(auth, []string{"-tls-cert", pki.clientCert}), 2, "give both or neither"},
		{"ca not PEM", e, with(auth, []string{"-tls-ca", pki.clientKey}), 2, "holds no PEM certificate"},
		{"ca missing", e, with(auth, []string{"-tls-ca", pki.ca + ".nope"}), 2, "-tls-ca"},
		{"key of another certificate", e, with(auth, []string{"-tls-cert", pki.clientCert, "-tls-key", pki.serverKey}), 2, "-tls-cert, -tls-key"},
	})
}

func TestConnOptions(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		check   func(t *testing.T, c *connFlags)
		errText string
	}{
		{name: "cluster", args: []string{"-redis", "10.0.0.1:6379,10.0.0.2:6379", "-cluster"}},
		{name: "cluster of one", args: []string{"-redis", "10.0.0.1:6379", "-cluster"}},
		{name: "sentinel", args: []string{"-redis", "10.0.0.1:26379,10.0.0.2:26379", "-sentinel-master", "mymaster", "-sentinel-password-env", "SPW"}},
		{name: "several without a topology", args: []string{"-redis", "10.0.0.1:6379,10.0.0.2:6379"}, errText: "-cluster"},
		{name: "both topologies", args: []string{"-redis", "10.0.0.1:6379", "-cluster", "-sentinel-master", "m"}, errText: "choose one"},
		{name: "not an address", args: []string{"-redis", "localhost"}, errText: `"localhost" is not host:port`},
		{name: "cluster db", args: []string{"-redis", "10.0.0.1:6379", "-cluster", "-db", "2"}, errText: "database 0 only"},
		{name: "sentinel password without sentinel", args: []string{"-redis", "10.0.0.1:6379", "-sentinel-password-env", "SPW"}, errText: "needs -sentinel-master"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var errOut bytes.Buffer
			code := runEnv(context.Background(), append(c.args, "-timeout", "1ms", "override", "list", "plans"),
				env{"SPW": secret}.get, &bytes.Buffer{}, &errOut)
			if c.errText != "" {
				if code != 2 || !strings.Contains(errOut.String(), c.errText) {
					t.Errorf("%q = %d, %q; want 2 and %q", c.args, code, errOut.String(), c.errText)
				}
				return
			}
			if strings.Contains(errOut.String(), secret) {
				t.Errorf("%q printed the password: %q", c.args, errOut.String())
			}
		})
	}
	// The options built for each topology.
	for _, c := range []struct {
		flags   connFlags
		cluster bool
		master  string
		addrs   int
		sentPW  bool
	}{
		{connFlags{redis: "a:1,b:2", cluster: true, db: -1}, true, "", 2, false},
		{connFlags{redis: "a:1,b:2", master: "m", sentinelEnv: "SPW", db: -1}, false, "m", 2, true},
		{connFlags{redis: "rediss://u@a:1/2", db: -1}, false, "", 1, false},
	} {
		o, _, err := c.flags.options(env{"SPW": secret}.get)
		if err != nil {
			t.Fatalf("%+v: %v", c.flags, err)
		}
		if o.IsClusterMode != c.cluster || o.MasterName != c.master || len(o.Addrs) != c.addrs || (o.SentinelPassword == secret) != c.sentPW {
			t.Errorf("%+v: options %+v", c.flags, o)
		}
	}
	o, _, _ := (&connFlags{redis: "rediss://u@a:1/2", db: -1}).options(env{}.get)
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "a" || o.Username != "u" || o.DB != 2 {
		t.Errorf("rediss URL: options %+v", o)
	}
}

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://:pw@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://u:pw@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u:p@w@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u@h:1", "redis://u@h:1"},
		{"redis://h:1/x@y", "redis://h:1/x@y"},
		{"h:1", "h:1"},
	} {
		if got := redactURL(c.in); got != c.want {
			t.Errorf("redactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTopologies runs the command against a real Sentinel deployment and a
// real Cluster: what it writes through the one is read back through the
// other form of address.
func TestTopologies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel deployment and a Cluster")
	}
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		sentinels := strings.Join(s.SentinelAddrs(), ",")
		runSteps(t, []step{
			{"deny", nil, []string{"-redis", sentinels, "-sentinel-master", s.MasterName(), "deny", "plans", "203.0.113.0/24"}, 0, ""},
			{"wrong master name", nil, []string{"-redis", sentinels, "-sentinel-master", "nope", "-timeout", "2s", "override", "list", "plans"}, 1, `do they monitor a master named "nope"?`},
		})
		code, out, errOut := sluiceEnv(t, nil, "-redis", s.Master(), "override", "list", "plans")
		if code != 0 || !strings.Contains(out, "203.0.113.0/24\tdeny") {
			t.Errorf("list on the master = %d, %q, %q; want the entry written through the sentinels", code, out, errOut)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		nodes := c.Addrs()
		runSteps(t, []step{
			{"allow through one node", nil, []string{"-redis", nodes[0], "-cluster", "allow", "plans", "tenant:internal"}, 0, ""},
			{"set through all", nil, []string{"-redis", strings.Join(nodes, ","), "-cluster", "override", "set", "plans", "tenant:acme", "10/s"}, 0, ""},
		})
		code, out, errOut := sluiceEnv(t, nil, "-redis", nodes[len(nodes)-1], "-cluster", "override", "list", "plans")
		if code != 0 || !strings.Contains(out, "tenant:acme\t10/s\ntenant:internal\tallow\n") {
			t.Errorf("list through another node = %d, %q, %q; want both entries", code, out, errOut)
		}
	})
}
