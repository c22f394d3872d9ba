// Command grpc serves a small gRPC service with three sluice limits, and
// calls it: 100 calls a minute per client address and 600 per tenant, on
// every method, unary or streaming, and 2 streams a minute per client on
// each streaming method. It uses an embedded miniredis unless REDIS_ADDR is
// set, so the limits it keeps are the ones the HTTP examples would share
// through the same Redis.
//
//	go run ./examples/grpc [-addr :50051]   # the server
//	go run ./examples/grpc -call localhost:50051   # the client, in another terminal
package main

import (
	"cmp"
	"context"
	"flag"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends, or with -call makes the client's calls.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("grpc", flag.ExitOnError)
	addr := fs.String("addr", cmp.Or(os.Getenv("ADDR"), ":50051"), "listen `address` (the default comes from $ADDR when set)")
	target := fs.String("call", "", "call the server at `address` instead of serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target != "" {
		return call(ctx, *target, stdout)
	}
	return serve(ctx, *addr, stdout)
}
