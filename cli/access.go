package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// accessFlags say how the commands reach a gateway that authenticates or serves HTTPS with a
// private CA's certificate. The API key is taken from the first of --api-key, --api-key-file,
// LEASEGATE_API_KEY and LEASEGATE_API_KEY_FILE that is set (the two flags, or the two variables,
// together are a usage error); it is sent as "Authorization: Bearer KEY" on every request,
// renewals, releases and run's events streams included. A key on the command line is visible to
// every user of the machine (ps, /proc/PID/cmdline) and lands in shell history: prefer a file
// only its owner can read, or the variable.
type accessFlags struct {
	apiKey, apiKeyFile, caFile *string
}

func (c *command) accessFlags(fs *flag.FlagSet) accessFlags {
	return accessFlags{
		apiKey: fs.String("api-key", "", "API `key` to send as \"Authorization: Bearer KEY\"; other users can see it in ps: prefer "+
			"--api-key-file or LEASEGATE_API_KEY (without either flag: LEASEGATE_API_KEY, else the file LEASEGATE_API_KEY_FILE names)"),
		apiKeyFile: fs.String("api-key-file", "", "`file` holding the API key to send (white space around it is ignored)"),
		caFile: fs.String("ca-file", c.env.CAFile, "PEM `file` of the CA certificate(s) to trust, instead of the system's, "+
			"for an https:// gateway whose certificate a private CA signed (default from LEASEGATE_CA_FILE)"),
	}
}

// clientOptions returns the SDK options that send the API key and trust the CA file, and sets
// c.keyFrom.
func (c *command) clientOptions(f common) ([]leasegate.ClientOption, error) {
	key, from, err := c.apiKey(f)
	if err != nil {
		return nil, err
	}
	c.keyFrom = from
	opts := []leasegate.ClientOption{leasegate.WithAPIKey(key)}
	if file := *f.access.caFile; file != "" {
		pool, err := leasegate.LoadCAFile(file)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		opts = append(opts, leasegate.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return opts, nil
}

// apiKey returns the API key to send ("" for none) and where it came from.
func (c *command) apiKey(f common) (key, from string, err error) {
	a := f.access
	keySet, fileSet := isSet(f.fs, "api-key"), isSet(f.fs, "api-key-file")
	switch {
	case keySet && fileSet:
		return "", "", errors.New("--api-key and --api-key-file exclude each other: give one")
	case keySet && *a.apiKey == "":
		return "", "", errors.New("--api-key needs a key")
	case keySet:
		return *a.apiKey, "--api-key", nil
	case fileSet:
		key, err := readKey(*a.apiKeyFile)
		return key, "--api-key-file " + *a.apiKeyFile, err
	case c.env.APIKey != "" && c.env.APIKeyFile != "":
		return "", "", errors.New("LEASEGATE_API_KEY and LEASEGATE_API_KEY_FILE are both set: unset one")
	case c.env.APIKey != "":
		return c.env.APIKey, "LEASEGATE_API_KEY", nil
	case c.env.APIKeyFile != "":
		key, err := readKey(c.env.APIKeyFile)
		return key, "LEASEGATE_API_KEY_FILE " + c.env.APIKeyFile, err
	}
	return "", "", nil
}

// readKey reads an API key from file, without the white space around it (the newline an editor
// or echo leaves).
func readKey(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("API key: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("API key file %s is empty", file)
	}
	return key, nil
}

// explain returns err's message, plus what to do when the gateway wants an API key it was not
// given or does not know, or when its certificate is not signed by a CA this client trusts.
func (c *command) explain(err error) string {
	var unknownCA x509.UnknownAuthorityError
	switch {
	case errors.Is(err, leasegate.ErrUnauthenticated) && c.keyFrom == "":
		return err.Error() + " (the gateway wants an API key: give it with --api-key-file FILE, LEASEGATE_API_KEY_FILE or LEASEGATE_API_KEY)"
	case errors.Is(err, leasegate.ErrUnauthenticated):
		return err.Error() + " (the API key from " + c.keyFrom + ")"
	case errors.Is(err, leasegate.ErrForbidden) && c.keyFrom != "":
		return err.Error() + " (the API key from " + c.keyFrom + ")"
	case errors.As(err, &unknownCA):
		return err.Error() + " (to trust the CA that signed the gateway's certificate, give its certificate with --ca-file FILE or LEASEGATE_CA_FILE)"
	}
	return err.Error()
}
