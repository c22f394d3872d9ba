module github.com/sluicehq/sluice/docs

go 1.25.0

replace (
	github.com/sluicehq/sluice => ..
	github.com/sluicehq/sluice/core/sluiceotel => ../core/sluiceotel
	github.com/sluicehq/sluice/core/sluiceprom => ../core/sluiceprom
	github.com/sluicehq/sluice/echolimit => ../echolimit
	github.com/sluicehq/sluice/fiberlimit => ../fiberlimit
	github.com/sluicehq/sluice/ginlimit => ../ginlimit
	github.com/sluicehq/sluice/grpclimit => ../grpclimit
)

require (
	github.com/prometheus/client_golang v1.24.1
	github.com/sluicehq/sluice v0.1.0
	github.com/sluicehq/sluice/core/sluiceotel v0.1.0
	github.com/sluicehq/sluice/core/sluiceprom v0.1.0
	github.com/sluicehq/sluice/grpclimit v0.1.0
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/sdk/metric v1.46.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/grpc v1.84.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.71.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.22.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/sdk v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
