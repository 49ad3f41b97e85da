"""Container Device Interface (CDI) export: a spec file from the same config and profile as the
hook (`spec`), its JSON Schema (`schema.json`), and the createContainer hooks it names
(`hooks`). Not imported by the hook's hot path."""
