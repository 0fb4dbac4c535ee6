"""One request for speech, from its options to its encoded audio, with no transport in it: the fields both
transports accept (`options`), the voice (`voice`), the engine's job (`jobs`), admission, first audio and accounting
(`run`), encoding (`encoding`), sentence scheduling (`sentences`), text that streams in spoken as it is made
(`utterances`) and the reasons a request fails (`errors`).
`app.api` words all of it for HTTP and the WebSocket."""
