"""How agentctl's evidence reads to people: words and a tone (green, amber, red, grey) over contract structs.

Pure (no I/O, checked by import-linter): the terminal renderer lays these out and maps a tone to ANSI, the hub
page gets them as JSON fields and lays them out itself, the probe uses the same tones.
"""
