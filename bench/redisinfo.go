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
	user, sys, err := UsedCPUSplit(ctx, rdb)
	return user + sys, err
}

// UsedCPUSplit returns the CPU time the server has used in its own code
// (used_cpu_user) and in the kernel on its behalf (used_cpu_sys), in
// seconds. The kernel's part is the server's system calls (reading
// requests, writing replies, waiting for sockets), paid per call whatever
// the command does; a script's instructions are in the user part.
func UsedCPUSplit(ctx context.Context, rdb *redis.Client) (user, sys float64, err error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, f := range InfoFields(info) {
		switch f[0] {
		case "used_cpu_user":
			user, _ = strconv.ParseFloat(f[1], 64)
		case "used_cpu_sys":
			sys, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return user, sys, nil
}
