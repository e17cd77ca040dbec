// A gateway in Go learns from placewatch which backends to avoid (nats.go).
//
//	go run avoid.go nats://127.0.0.1:4222
//
// Watches the KV bucket placewatch_compute: every shard's latest ComputeStatus, then each
// change. Prints "ready" once the current ones are read, then a line a status:
// "avoid|serve URL NODE/SHARD VERDICT". A gateway would take URL off (or put it back on) its
// backends there. Checked against nats.go 1.22.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Endpoint is where a shard serves, as its status says.
type Endpoint struct {
	Scheme     string `json:"scheme"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	PathPrefix string `json:"path_prefix"`
}

// ComputeStatus holds the fields a gateway acts on; the others are left out.
type ComputeStatus struct {
	Schema   int       `json:"schema"`
	Node     string    `json:"node"`
	Shard    string    `json:"shard"`
	Verdict  string    `json:"verdict"`
	Endpoint *Endpoint `json:"endpoint"`
}

var avoided = map[string]bool{"cpu_fallback": true, "misplaced": true, "gone": true}

func (e *Endpoint) URL() string {
	host := e.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // an IPv6 address
	}
	return fmt.Sprintf("%s://%s:%d%s", e.Scheme, host, e.Port, e.PathPrefix)
}

func main() {
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err == nil {
		var kv nats.KeyValue
		if kv, err = js.KeyValue("placewatch_compute"); err == nil {
			err = watch(kv)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func watch(kv nats.KeyValue) error {
	w, err := kv.WatchAll()
	if err != nil {
		return err
	}
	for entry := range w.Updates() {
		if entry == nil {
			fmt.Println("ready") // the current statuses are read; changes follow
			continue
		}
		var s ComputeStatus
		if entry.Operation() != nats.KeyValuePut || json.Unmarshal(entry.Value(), &s) != nil {
			continue
		}
		if s.Schema > 2 || s.Endpoint == nil {
			continue // a newer schema than this reader's, or a shard that serves nowhere known
		}
		what := "serve"
		if avoided[s.Verdict] {
			what = "avoid"
		}
		fmt.Printf("%s %s %s/%s %s\n", what, s.Endpoint.URL(), s.Node, s.Shard, s.Verdict)
	}
	return nil
}
