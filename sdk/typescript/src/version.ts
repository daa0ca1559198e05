/** The SDK's version (package.json's; a unit test checks they agree). */
export const VERSION = "0.1.0";

/** The SDK's name and version, as `hello` tells the engine. */
export const SDK_NAME = `cairn-typescript/${VERSION}`;
