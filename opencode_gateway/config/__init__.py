"""What a run is configured by: the settings (config.yaml and flags, resolved into one frozen
value), declared once as a table (fields.py: what is said of a setting; sections.py: every
setting, section by section, each section building its package's config), the settings file's
reading, the options of one run, and the attribution (tags and metadata) checked once for
everywhere they go.

May import: errors, credentials, `_yaml`, and the values a setting holds from accounting/,
approvals/, endpoint/, litellm_gateway/, observability/ and opencode/. Never runs/, serve/,
batch/ or cli/."""
