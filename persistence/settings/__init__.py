"""The settings block: parsed into :class:`protocol.settings.OmSettings` (:mod:`.parse`), every key
omray knows (:mod:`.keys`), and the settings file read (:mod:`.file`)."""
