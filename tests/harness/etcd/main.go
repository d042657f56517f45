// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 so the harness needs no
// distribution package: the whole program is the upstream etcdmain entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
