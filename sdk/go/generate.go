package leasegate

// The generator is a tool of the repository's root module (go.mod's tool directive), so it runs
// from there; the SDK module itself depends only on oapi-codegen's small runtime and uuid.
//go:generate go -C ../.. tool oapi-codegen -config sdk/go/oapi-codegen.yaml openapi.yaml
