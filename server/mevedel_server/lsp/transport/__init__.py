"""The bytes between an editor and the server, hardened: ``framing`` reads
frames whatever arrives (``FrameReader``), ``wire_protocol`` checks each
message's envelope and lifecycle and converts params and results
(``MevedelProtocol``, ``plain_json_converter``). Nothing here knows a
feature; the features never see a frame."""
