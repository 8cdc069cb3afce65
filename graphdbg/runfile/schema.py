"""The run file's identity, shared by its writer and its reader: the tag in
`meta.format` and the schema version `RunWriter` writes (the tables are in
`graphdbg/runfile/writer.py`: bump the version with them) and `graphdbg.runfile.query.Run`
reads up to. Its own module, so that the reader need not import the writer."""

FORMAT = "graphdbg-run"
SCHEMA_VERSION = 2  # 2: node_values

# The phases of a compile, in order, as the `graphdbg_compile_time` events
# hold them (hooks/record/trace.py `compile_phases` says what each is); they add up
# to the compile's total.
COMPILE_PHASES = ("dynamo", "graphdbg", "backend", "aot", "cache", "lowering", "codegen", "cpp")
