package api

// HeaderClient names the program that sends a request ("strata-go" for
// api/client). The agent takes a write with any Content-Type from a
// request that carries it: a browser page of another origin cannot send a
// custom header without a CORS preflight, which the agent never grants.
const HeaderClient = "Strata-Client"
