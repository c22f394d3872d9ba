module github.com/sluicehq/sluice/internal/compat

go 1.26.0

replace github.com/sluicehq/sluice => ../..

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gorilla/mux v1.8.1
	github.com/julienschmidt/httprouter v1.3.0
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sluicehq/sluice v0.1.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v2 v2.4.5
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
