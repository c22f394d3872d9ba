package docs

// The README's snippets import these; importing them here keeps them in
// this module's go.mod and go.sum, at the versions this repository tests,
// for the scratch module the snippets are built in (see scratchModule).
import (
	_ "github.com/sluicehq/sluice/echolimit"
	_ "github.com/sluicehq/sluice/fiberlimit"
	_ "github.com/sluicehq/sluice/ginlimit"
	_ "github.com/sluicehq/sluice/grpclimit"
	_ "github.com/sluicehq/sluice/outbound"
	_ "github.com/sluicehq/sluice/outbound/grpcout"
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"
	_ "google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health/grpc_health_v1"
	_ "google.golang.org/grpc/status"
)
