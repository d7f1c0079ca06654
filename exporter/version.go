package exporter

import "runtime"

func goVersion() string { return runtime.Version() }
