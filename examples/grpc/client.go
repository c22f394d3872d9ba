package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// call makes the demo's calls to the server at target and prints what each
// one got: its status, the rate-limit metadata, and for a refusal the
// delay from its RetryInfo detail.
func call(ctx context.Context, target string, stdout io.Writer) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := greeterClient{conn}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	acme := metadata.AppendToOutgoingContext(ctx, "x-tenant-id", "acme")

	var header metadata.MD
	res, err := client.Hello(acme, wrapperspb.String("acme"), grpc.Header(&header))
	if status.Code(err) == codes.Unavailable {
		return fmt.Errorf("is the server running? %w", err)
	}
	report(stdout, "Hello, tenant acme", fmt.Sprintf("%q", res.GetValue()), err, header, "x-ratelimit-remaining")

	header = nil
	_, err = client.Hello(ctx, wrapperspb.String("nobody"), grpc.Header(&header))
	report(stdout, "Hello, no tenant", "", err, header, "x-ratelimit-remaining")

	for range 3 {
		got, header, err := count(acme, client, 3)
		report(stdout, "Count to 3, tenant acme", got, err, header, "x-ratelimit-remaining")
	}
	return nil
}

// count reads a Count stream to its end.
func count(ctx context.Context, client greeterClient, n int32) (got string, header metadata.MD, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Count(ctx, wrapperspb.Int32(n))
	if err != nil {
		return "", nil, err
	}
	var nums []string
	for {
		m := new(wrapperspb.Int32Value)
		if err = stream.RecvMsg(m); err != nil {
			break
		}
		nums = append(nums, fmt.Sprint(m.GetValue()))
	}
	header, _ = stream.Header() // sent before the first message, or with the refusal
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return strings.Join(nums, " "), header, err
}

// report prints one call's outcome: its status code, what it returned or
// the status message, the named metadata field (one value per interceptor
// that set it, outermost first) and, for a refusal, when to retry.
func report(w io.Writer, what, got string, err error, header metadata.MD, field string) {
	st := status.Convert(err)
	line := fmt.Sprintf("%-24s -> %s", what, st.Code())
	if err != nil {
		got = fmt.Sprintf("%q", st.Message())
	}
	if got != "" {
		line += " " + got
	}
	if v := header.Get(field); len(v) > 0 {
		line += fmt.Sprintf("; %s %v", field, v)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay := ri.GetRetryDelay().AsDuration()
			line += fmt.Sprintf("; RetryInfo: retry in %v", time.Duration(math.Ceil(delay.Seconds()))*time.Second)
		}
	}
	fmt.Fprintln(w, line)
}
