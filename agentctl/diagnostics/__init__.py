"""Release diagnostics: endpoint tests by stored name, the copyable diagnostics report, tools views, rendering."""
