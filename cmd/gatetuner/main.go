// Command gatetuner keeps the llm-d EPP's prefix-cache-affinity load gate
// tuned: it estimates live prefill throughput and prompt distributions from
// Prometheus, replays the exact gate decision in shadow, and — on evidence,
// inside strict guards — pushes recommended settings into the EPP's config.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// Set by the linker (see Makefile).
var (
	version = "dev"
	commit  = "unknown"
)

// app holds what every command shares: output streams and configuration.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	v              *viper.Viper
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "gatetuner",
		Short: "Keep the llm-d EPP's prefix-cache-affinity load gate tuned",
		Long: `gatetuner estimates each llm-d deployment's live prefill drain rate and prompt
distributions from Prometheus, replays the EPP's prefix-cache-affinity gate decision
in shadow for the current and candidate settings, and — on evidence, inside strict
guards — pushes the recommended penalty mode and ceiling into the EPP's ConfigMap.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetIn(a.stdin)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: 2, err: fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	a.v.SetEnvPrefix("GATETUNER")
	a.v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	a.v.AutomaticEnv()
	for _, add := range commands {
		root.AddCommand(add(a))
	}
	return root
}

// commands are the subcommands; each file registers its own in init.
var commands []func(*app) *cobra.Command

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, stdin: stdin, v: viper.New()}
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "gatetuner: %v\n", err)
	return exitCode(err)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
