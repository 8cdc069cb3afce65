"""`graphdbg repro`: a finding as a small standalone script (torch,
safetensors and the standard library only), checked in a fresh process
before it is offered. `plan` reads what the check recorded (torch-free),
`codegen` and `script` write the script's text, `make` writes and verifies
it (docs/repro.md)."""
