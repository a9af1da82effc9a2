# The device's MCP tools (reference §4.6): names and schemas of the official firmware, so servers'
# prompts work unchanged.
import asyncio

from wren_device import info
from wren_device.log import log
from wren_device.mcp import Prop


def register(mcp, device):
    mcp.add_tool(
        "self.get_device_status",
        "Provides the real-time information of the device, including the current status of the audio "
        "speaker, screen, battery, network, etc.\nUse this tool for: \n1. Answering questions about "
        "current condition (e.g. what is the current volume of the audio speaker?)\n2. As the first step "
        "to control the device (e.g. turn up / down the volume of the audio speaker, etc.)",
        [],
        lambda: info.device_status(device.board, device.volume, device.ssid),
    )
    mcp.add_tool(
        "self.audio_speaker.set_volume",
        "Set the volume of the audio speaker. If the current volume is unknown, you must call "
        "`self.get_device_status` tool first and then call this tool.",
        [Prop("volume", "integer", minimum=0, maximum=100)],
        lambda volume: _set_volume(device, volume),
    )
    mcp.add_tool(
        "self.light.set_rgb",
        "Set the colour of the board's RGB light.",
        [Prop("r", "integer", minimum=0, maximum=255), Prop("g", "integer", minimum=0, maximum=255),
         Prop("b", "integer", minimum=0, maximum=255)],
        lambda r, g, b: _set_rgb(device, r, g, b),
    )
    mcp.add_tool(
        "self.get_system_info",
        "Get the system information",
        [],
        lambda: info.system_info(device.cfg, device.board, device.identity, device.ssid),
        user_only=True,
    )
    mcp.add_tool("self.reboot", "Reboot the system", [], lambda: _reboot_soon(device), user_only=True)
    for i in range(device.cfg.get("test_extra_tools", 0)):
        # Test builds only: filler tools big enough that tools/list needs several 8 KB pages.
        mcp.add_tool(
            "self.test.filler_%02d" % i,
            "Filler tool %d registered by a test build to exercise tools/list paging. " % i + "x" * 400,
            [Prop("value", "integer", default=0, minimum=0, maximum=1000)],
            _echo,
        )


def _set_volume(device, volume):
    device.volume = volume
    device.downlink.set_volume(volume)  # the real playback gain (viper scale-and-clamp)
    log("volume", volume)
    return True


def _set_rgb(device, r, g, b):
    device.board.led.set_rgb(r, g, b)
    return True


def _echo(value):
    return value


def _reboot_soon(device):
    # Reply first, reboot about 1 s later (§4.6).
    async def later():
        await asyncio.sleep_ms(1000)
        device.board.reboot()

    asyncio.create_task(later())
    return True
