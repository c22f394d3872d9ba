package bench

import (
	"bufio"
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// InfoFields splits INFO text into name, value pairs.
func InfoFields(text string) [][2]string {
	var out [][2]string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// UsedCPU returns the CPU time the server has used, used_cpu_sys plus
// used_cpu_user from INFO cpu, in seconds.
func UsedCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var t float64
	for _, f := range InfoFields(info) {
		if f[0] == "used_cpu_sys" || f[0] == "used_cpu_user" {
			v, _ := strconv.ParseFloat(f[1], 64)
			t += v
		}
	}
	return t, nil
}
