"""The spec language: YAML specs loaded, validated against one typed schema (errors name
the key path, the value and what is allowed) and expanded into runs."""
