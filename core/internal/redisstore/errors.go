package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Reason classifies a store error for metrics and logs: one of the
// Reason constants; "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if deniedByACL(msg) {
			return ReasonNoPerm
		}
		for _, r := range redisReasons {
			if strings.HasPrefix(msg, r.prefix) {
				return r.reason
			}
		}
		return ReasonOther
	}
	var nerr net.Error
	switch {
	case errors.Is(err, ErrKeyFailed), errors.Is(err, errBadReply):
		return ReasonScript
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return ReasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, redis.ErrClosed),
		errors.As(err, new(*net.OpError)):
		return ReasonConnection
	}
	return ReasonOther
}

// deniedByACL reports whether msg, a Redis error reply, says the user may
// not run a command: NOPERM as a command's own reply, and, raised inside a
// script, the wordings Redis 7.0 ("The user executing the script can't run
// this command"), Valkey 8 ("ACL failure in script") and later servers
// ("NOPERM ... no permissions") give.
// A script's refusal would otherwise read as a fault of the script.
func deniedByACL(msg string) bool {
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "no permissions to run") || strings.Contains(msg, "ACL failure") ||
		strings.Contains(msg, "can't run this command")
}

// redisReasons maps the prefixes of Redis error replies to reasons.
var redisReasons = [...]struct{ prefix, reason string }{
	{"LOADING", ReasonLoading},
	{"NOAUTH", ReasonAuth},
	{"WRONGPASS", ReasonAuth},
	{"NOPERM", ReasonNoPerm},
	{"READONLY", ReasonReadOnly},
	{"CLUSTERDOWN", ReasonClusterDown},
	{"MASTERDOWN", ReasonClusterDown},
	{"TRYAGAIN", ReasonClusterDown},
	{"OOM", ReasonOOM},
	{"BUSY", ReasonScript},
	{"NOSCRIPT", ReasonScript},
	{"WRONGTYPE", ReasonScript},
	{"ERR Error running script", ReasonScript},
	{"ERR user_script", ReasonScript},
}

// KeyFault reports whether err is a fault of the key: Redis answered, and
// the answer concerns this key's value or arguments alone.
func KeyFault(err error) bool {
	if errors.Is(err, ErrKeyFailed) || errors.Is(err, errBadReply) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGTYPE"):
		return true
	case strings.HasPrefix(msg, "ERR "):
		// An error raised in a script (a runtime error, or one of the
		// scripts' own "sluice:" refusals) names the script; an ERR of
		// the server's own state (too many clients, ...) does not.
		return strings.Contains(msg, "script") || strings.Contains(msg, "sluice:")
	}
	return false
}

// Reasons [Reason] returns: core's Reason constants, which a test holds
// equal. Each names a class of store failure that calls for a different
// response from an operator.
const (
	ReasonTimeout     = "timeout"     // the budget or the caller's deadline ran out
	ReasonRefused     = "refused"     // nothing listens at the address
	ReasonConnection  = "connection"  // the connection broke (reset, EOF, closed pool)
	ReasonLoading     = "loading"     // the server is loading its dataset
	ReasonReadOnly    = "readonly"    // a replica answered a write: a failover is in progress
	ReasonClusterDown = "clusterdown" // the Cluster cannot serve the slot
	ReasonOOM         = "oom"         // the server is at maxmemory
	ReasonScript      = "script"      // the script failed (a key of another type, a busy script)
	ReasonAuth        = "auth"        // authentication failed (NOAUTH, WRONGPASS)
	ReasonNoPerm      = "noperm"      // the Redis user may not run a command or touch a key (NOPERM)
	ReasonOther       = "other"       // anything else
	// ReasonPaused is a timeout that overlapped a pause of this process,
	// charged to no node (see [Call.Paused]); Reason never gives it.
	ReasonPaused = "paused"
)
