// Package ndk will hold the NDKPI object and lifetime layer (asynchronous create,
// request and close completions, antecedent/successor close, endpoint reference
// counts) and the NetworkDirect overlapped model, on top of package verbs.
package ndk
