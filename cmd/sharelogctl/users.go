package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func (a *app) userClient() (sharelogv1.UserServiceClient, error) {
	if _, err := a.logClient(); err != nil { // dials once
		return nil, err
	}
	return sharelogv1.NewUserServiceClient(a.conn), nil
}

func (a *app) usersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "Manage the Kafka listener's users (SCRAM credentials)",
		Long: `Manage the users who log in to the Kafka listener with SASL SCRAM-SHA-256 or
SCRAM-SHA-512 (principal User:<name>). The server keeps a salt, the iteration count and the
keys derived from the password, never the password. Setting and deleting need ALTER on the
cluster, listing DESCRIBE on it. See docs/security.md "SCRAM users".`,
	}
	scram := &cobra.Command{
		Use:   "scram",
		Short: "Set, delete and list SCRAM credentials",
		Example: `  sharelogctl users scram set alice --mechanism SCRAM-SHA-512 --password-stdin <<< 's3cret'
  sharelogctl users scram set bob --password 's3cret' --iterations 16384
  sharelogctl users scram list
  sharelogctl users scram delete alice --mechanism SCRAM-SHA-512`,
	}
	scram.AddCommand(a.usersScramSetCmd(), a.usersScramDeleteCmd(), a.usersScramListCmd())
	cmd.AddCommand(scram)
	return cmd
}

// readPassword is the first line of r, without its line ending.
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading stdin: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("--password-stdin: stdin holds no password")
	}
	return line, nil
}

func (a *app) usersScramSetCmd() *cobra.Command {
	var (
		mechanism, password string
		fromStdin           bool
		iterations          int32
	)
	cmd := &cobra.Command{
		Use:   "set <user>",
		Short: "Create or replace a user's SCRAM credential for one mechanism",
		Long: `Create or replace the credential of <user> for --mechanism from a password given with
--password or, better (it stays out of the shell history and the process list), the first line
of stdin with --password-stdin. --iterations is 4096 to 16384 (default 8192).`,
		Args: cobra.ExactArgs(1),
	}
	fl := cmd.Flags()
	fl.StringVar(&mechanism, "mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256 or SCRAM-SHA-512")
	fl.StringVar(&password, "password", "", "the password (prefer --password-stdin)")
	fl.BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of stdin")
	fl.Int32Var(&iterations, "iterations", 8192, "PBKDF2 iterations, 4096 to 16384")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		if fromStdin == (password != "") {
			return errors.New("give exactly one of --password and --password-stdin")
		}
		if fromStdin {
			var err error
			if password, err = readPassword(a.stdin); err != nil {
				return err
			}
		}
		client, err := a.userClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: args[0],
			Mechanism: strings.ToUpper(mechanism), Iterations: iterations,
			Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: password}})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		fmt.Fprintf(a.stdout, "set %s credential of %s (%d iterations)\n", strings.ToUpper(mechanism), args[0], iterations)
		return nil
	})
	return cmd
}

func (a *app) usersScramDeleteCmd() *cobra.Command {
	var mechanism string
	cmd := &cobra.Command{
		Use:   "delete <user>",
		Short: "Delete a user's SCRAM credential for one mechanism",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&mechanism, "mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256 or SCRAM-SHA-512")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.userClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		if _, err := client.DeleteScramCredential(ctx, &sharelogv1.DeleteScramCredentialRequest{User: args[0], Mechanism: strings.ToUpper(mechanism)}); err != nil {
			return err
		}
		if !a.jsonOutput() {
			fmt.Fprintf(a.stdout, "deleted %s credential of %s\n", strings.ToUpper(mechanism), args[0])
		}
		return nil
	})
	return cmd
}

func (a *app) usersScramListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the users with their mechanisms and iterations",
		Args:    cobra.NoArgs,
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		client, err := a.userClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		tw := newTable(a)
		fmt.Fprintln(tw, "USER\tMECHANISM\tITERATIONS")
		for _, u := range resp.GetUsers() {
			for _, c := range u.GetCredentials() {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", u.GetName(), c.GetMechanism(), c.GetIterations())
			}
		}
		return tw.Flush()
	})
	return cmd
}
