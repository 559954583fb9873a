// Types of the bridge, for `tsc --checkJs` only (never installed, never loaded by OpenCode).
//
// OpenCodeClient is the part of OpenCode 1.18's in-process SDK client (@opencode-ai/sdk v1,
// handed to a plugin as `input.client`) that the bridge calls, as it calls it: a call resolves
// to `{data}` or `{error}` (it does not throw on an HTTP error).

export interface SdkResult<T = unknown> {
  data?: T
  error?: unknown
  response?: { status?: number }
}

export interface SessionInfo {
  id: string
  parentID?: string | null
}

export interface TextPartInput {
  type: "text"
  text: string
  metadata?: Record<string, unknown>
}

export interface PromptBody {
  parts: TextPartInput[]
  agent?: string
  model?: Record<string, unknown>
  variant?: string
}

export interface ToastBody {
  title?: string
  message: string
  variant?: string
  duration?: number
}

export interface LogBody {
  service: string
  level: string
  message: string
  extra?: Record<string, unknown>
}

export interface OpenCodeClient {
  /** The v1 SDK has no health(): its raw fetch client reaches `/global/health`. */
  _client: { get(options: { url: string }): Promise<SdkResult<{ version?: string }>> }
  session: {
    get(options: { path: { id: string } }): Promise<SdkResult<SessionInfo>>
    promptAsync(options: { path: { id: string }, body: PromptBody }): Promise<SdkResult>
    abort(options: { path: { id: string } }): Promise<SdkResult>
  }
  tui: { showToast(options: { body: ToastBody }): Promise<SdkResult> }
  app: { log(options: { body: LogBody }): Promise<SdkResult> | unknown }
}

/** What OpenCode hands the plugin's `server()` (the fields the bridge reads). */
export interface PluginInput {
  client: OpenCodeClient
  directory?: string
  worktree?: string
  project?: { id?: string } | null
  serverUrl?: URL | string
}

/** A bus event as OpenCode publishes it. */
export interface BusEvent {
  type: string
  properties?: any
}

/** Any line of protocol v1 after `validate`: `{v: 1, type, ...fields}` (see SCHEMA). */
export interface WireMessage {
  v: 1
  type: string
  [field: string]: any
}

/** Daemon -> bridge requests, as the bridge reads them (fields per SCHEMA). */
export interface PromptRequest extends WireMessage {
  type: "prompt"
  id: string
  session_id: string
  text: string
  agent?: string | null
  model?: Record<string, unknown> | null
  variant?: string | null
  marker?: { injection?: string, [key: string]: unknown } | null
}

export interface ReplyMessage extends WireMessage {
  type: "reply"
  id: string
  ok: boolean
  title?: string | null
  message: string
  variant?: string | null
}

/** The hello's `sessions` entry for one session. */
export interface SessionWire {
  status: string | null
  next?: number
  permissions?: string[]
  questions?: string[]
}
