module github.com/sluicehq/sluice/docs

go 1.26.0

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
	github.com/prometheus/client_golang v1.25.0
	github.com/sluicehq/sluice v0.1.0
	github.com/sluicehq/sluice/core/sluiceotel v0.1.0
	github.com/sluicehq/sluice/core/sluiceprom v0.1.0
	github.com/sluicehq/sluice/grpclimit v0.1.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
