// Command etcd is upstream etcd's server entry point, built inside this module because
// etcd's server module carries replace lines that make `go install` refuse it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
