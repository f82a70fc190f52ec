"""What a run is configured by: the settings (config.yaml and flags, resolved into one frozen
value), the settings file's reading, the options of one run, and the attribution (tags and
metadata) checked once for everywhere they go.

May import: errors, credentials, `_yaml`, and the values a setting holds from accounting/,
approvals/, endpoint/, litellm_gateway/, observability/ and opencode/. Never runs/, serve/,
batch/ or cli/."""
